/**
 * `npm run bench concurrentcost`: where the CPU goes when 8 streaming clients share the engine,
 * nativegen (a real `nativegen serve` through its HTTP API, 4 sequences for requests without a
 * conversation) against llama-server (its default slots) on the `qwen-bench` model, the peer
 * benchmark's concurrent figure (bench/peer.ts) seen from /proc instead of the clock. Per round
 * (the sides alternate which goes first) the CPU time of each server process, and of nativegen's
 * engine child split into its main thread (JavaScript) and its other threads (ggml's compute,
 * libuv's pool), before and after 8 requests sent together, divided by the tokens generated; with
 * the wall-clock tokens/s. What is not native compute is what the runtime adds per token.
 *
 * Environment: CONCURRENT_TOKENS (per request, "16,128"), CONCURRENT_ROUNDS (3),
 * CONCURRENT_THREADS (1), CONCURRENT_CLIENTS (8). Writes bench/results/concurrentcost.json.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Effect from "effect/Effect"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { ensureModel, projectRoot } from "../fixtures/models.js"
import { loadavg, parentOf, processCpu, threadCpu } from "./_proccpu.js"
import * as Http from "./peer/Http.js"
import * as LlamaServer from "./peer/LlamaServer.js"
import * as Nativegen from "./peer/Nativegen.js"
import { userPrompt } from "./peer/Prompts.js"

const TOKENS = (process.env.CONCURRENT_TOKENS ?? "16,128").split(",").map(Number)
const ROUNDS = Number(process.env.CONCURRENT_ROUNDS ?? 3)
const THREADS = Number(process.env.CONCURRENT_THREADS ?? 1)
const CLIENTS = Number(process.env.CONCURRENT_CLIENTS ?? 8)
const CONTEXT = 8192
const MODEL_NAME = "qwen-bench"
const modelPath = ensureModel(MODEL_NAME)

/** CPU ms per process (nativegen: host, child main thread, child other threads; llama-server: whole). */
interface Cpu {
  readonly host: number
  readonly childMain: number
  readonly childNative: number
}
const nativegenCpu = (hostPid: number, childPid: number): Cpu => {
  let childMain = 0
  let childNative = 0
  for (const [tid, t] of threadCpu(childPid)) {
    if (tid === childPid) childMain += t.ms
    else childNative += t.ms
  }
  return { host: processCpu(hostPid), childMain, childNative }
}

/** `CLIENTS` streamed requests sent together: generated tokens and wall ms. */
const together = (url: string, side: string, tokens: number, round: number) =>
  Effect.promise(async () => {
    const start = performance.now()
    const results = await Promise.all(Array.from({ length: CLIENTS }, (_, i) =>
      Http.streamChat(url, { model: MODEL_NAME, messages: userPrompt(`concurrentcost/${side}/${tokens}/${round}/${i}`, 20), maxTokens: tokens })))
    const generated = results.reduce((sum, s) => sum + (s.completionTokens ?? s.arrivals.length), 0)
    return { generated, ms: performance.now() - start }
  })

interface Round {
  readonly tokens: number
  readonly nativegen: { readonly tokPerS: number; readonly host: number; readonly childMain: number; readonly childNative: number }
  readonly llamaServer: { readonly tokPerS: number; readonly cpu: number }
  readonly load: string
}

const fmt = (x: number) => x.toFixed(3)
const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2
}

const program = Effect.scoped(Effect.gen(function*() {
  const built = yield* LlamaServer.ensureBuilt(projectRoot).pipe(Effect.orDie)
  const ng = yield* Nativegen.serve({ modelPath, modelName: MODEL_NAME, threads: THREADS, contextSize: CONTEXT })
  const ls = yield* LlamaServer.start(built.binary, { model: modelPath, threads: THREADS, contextSize: CONTEXT, batchSize: 512 }).pipe(Effect.orDie)
  const hostPid = parentOf(ng.enginePid)
  console.log(`${CLIENTS} clients, ${THREADS} thread(s); nativegen host ${hostPid}, child ${ng.enginePid}; llama-server ${ls.pid}; load ${loadavg()}`)
  // Warm both (the first request of a shape is slow on either side).
  yield* together(ng.httpUrl, "warm-ng", 4, 0)
  yield* together(ls.url, "warm-ls", 4, 0)
  const results = []
  for (const tokens of TOKENS) {
    const rounds: Array<Round> = []
    for (let r = 0; r < ROUNDS; r++) {
      const runNativegen = Effect.gen(function*() {
        const before = nativegenCpu(hostPid, ng.enginePid)
        const run = yield* together(ng.httpUrl, "ng", tokens, r)
        const after = nativegenCpu(hostPid, ng.enginePid)
        const per = (k: keyof Cpu) => (after[k] - before[k]) / run.generated
        return { tokPerS: run.generated / (run.ms / 1000), host: per("host"), childMain: per("childMain"), childNative: per("childNative") }
      })
      const runServer = Effect.gen(function*() {
        const before = processCpu(ls.pid)
        const run = yield* together(ls.url, "ls", tokens, r)
        return { tokPerS: run.generated / (run.ms / 1000), cpu: (processCpu(ls.pid) - before) / run.generated }
      })
      const nativegenFirst = r % 2 === 0
      const a = nativegenFirst ? yield* runNativegen : undefined
      const server = yield* runServer
      const n = a ?? (yield* runNativegen)
      const row: Round = { tokens, nativegen: n, llamaServer: server, load: loadavg() }
      rounds.push(row)
      console.log(`  ${tokens} tokens, round ${r + 1}: nativegen ${n.tokPerS.toFixed(1)} tok/s, CPU ms/token host ${fmt(n.host)} child JS ${fmt(n.childMain)} ` +
        `child native ${fmt(n.childNative)}; llama-server ${server.tokPerS.toFixed(1)} tok/s, CPU ${fmt(server.cpu)}; load ${row.load}`)
    }
    const m = (f: (r: Round) => number) => median(rounds.map(f))
    const summary = {
      tokens,
      nativegenTokPerS: m((r) => r.nativegen.tokPerS),
      llamaServerTokPerS: m((r) => r.llamaServer.tokPerS),
      host: m((r) => r.nativegen.host),
      childMain: m((r) => r.nativegen.childMain),
      childNative: m((r) => r.nativegen.childNative),
      nativegenTotal: m((r) => r.nativegen.host + r.nativegen.childMain + r.nativegen.childNative),
      llamaServerTotal: m((r) => r.llamaServer.cpu)
    }
    results.push({ summary, rounds })
    console.log(`\n| ${CLIENTS} clients × ${tokens} tokens, ${THREADS} thread(s), medians of ${ROUNDS} | nativegen | llama-server |\n|---|---|---|\n` +
      `| tokens/s (wall) | ${summary.nativegenTokPerS.toFixed(1)} | ${summary.llamaServerTokPerS.toFixed(1)} |\n` +
      `| CPU ms per token: host (HTTP, scheduling) | ${fmt(summary.host)} | |\n` +
      `| CPU ms per token: engine child JavaScript | ${fmt(summary.childMain)} | |\n` +
      `| CPU ms per token: engine native threads | ${fmt(summary.childNative)} | |\n` +
      `| CPU ms per token: all | ${fmt(summary.nativegenTotal)} | ${fmt(summary.llamaServerTotal)} |\n`)
  }
  const out = Path.join(import.meta.dirname, "results", "concurrentcost.json")
  Fs.writeFileSync(out, JSON.stringify({ date: new Date().toISOString(), loadavg: loadavg(), threads: THREADS, clients: CLIENTS, model: MODEL_NAME, results }, null, 2))
  console.log(`wrote ${Path.relative(projectRoot, out)}`)
}))

NodeRuntime.runMain(program)
