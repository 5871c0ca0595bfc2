/**
 * `npm run bench peer`: nativegen against llama.cpp's own server on the same engine (issue 18's
 * benchmark). llama-server is built once from node-llama-cpp's bundled llama.cpp source into a
 * cache outside git (bench/peer/LlamaServer.ts; several minutes the first time, skipped with a
 * message when cmake or a compiler is missing); nativegen runs as a real `nativegen serve` process
 * with the benchmark model in a signed store, reached through the client library over its socket
 * and through its HTTP API. Both run the `qwen-bench` model with the same threads, context and
 * greedy settings; the sides alternate in rotated order every round. Writes
 * bench/results/peer.{json,md,svg}.
 *
 * Environment: PEER_ROUNDS (default 3), PEER_QUICK=1 (fewer tokens, smaller files: a development
 * run), PEER_THREADS (default "1,2"), PEER_ONLY (comma-separated figure groups: decode, prefill,
 * concurrent, latency, oneshot, foreground, decision, repair, store).
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Context from "effect/Context"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { promisify } from "node:util"
import { ensureModel, projectRoot, sha256File } from "../fixtures/models.js"
import { benchBackend, benchModel, peerGpuLayers } from "./_target.js"
import * as Client from "../src/rpc/Client.js"
import { Provider } from "../src/services/Provider.js"
import { run as runCli } from "../test/cli/support.js"
import * as Http from "./peer/Http.js"
import * as Foreground from "./peer/Foreground.js"
import * as LlamaServer from "./peer/LlamaServer.js"
import * as Nativegen from "./peer/Nativegen.js"
import { chatMl, followUp, history, userPrompt } from "./peer/Prompts.js"
import * as Report from "./peer/Report.js"
import * as Result from "./peer/Result.js"
import { pairedRatio, perSecond, summarize } from "./peer/Stats.js"

const ROUNDS = Math.max(1, Number(process.env.PEER_ROUNDS ?? 3))
const QUICK = process.env.PEER_QUICK === "1"
const THREADS = (process.env.PEER_THREADS ?? "1,2").split(",").map(Number)
const ONLY = process.env.PEER_ONLY === undefined ? undefined : new Set(process.env.PEER_ONLY.split(","))
const wanted = (group: string) => ONLY === undefined || ONLY.has(group)
const CONTEXT = 8192
const BATCH = 512
const DECODE_TOKENS = QUICK ? 32 : 128
const PREFILL_WORDS = QUICK ? [300, 1000] : [1000, 3800]
const FOLLOW_UP_WORDS = QUICK ? 50 : 200
const CLIENTS = 8
const CONCURRENT_TOKENS = QUICK ? [16] : [16, 128]
const LATENCY_REQUESTS = 5
/** Words of the conversation a foreground request finds being prepared (about one token each). */
const PREPARE_WORDS = QUICK ? 1000 : 3800
/** The engine's prefill chunk (NativeWorkerConfig's default, which `nativegen serve` keeps). */
const PREFILL_CHUNK = 128
const STORE_MIB = Number(process.env.PEER_STORE_MIB ?? (QUICK ? 64 : 256))
const MODEL_NAME = benchModel("qwen-bench")

const execFile = promisify(ChildProcess.execFile)
const loadavg = () => Fs.readFileSync("/proc/loadavg", "utf8").trim()
const log = (line: string) => console.log(`[${new Date().toISOString().slice(11, 19)} load ${loadavg().split(" ").slice(0, 3).join(" ")}] ${line}`)
const promise = <A>(f: () => Promise<A>) => Effect.promise(f)

/** Runs `sides` in an order rotated by `round`, returning their results in the given order. */
const rotated = <A>(round: number, sides: ReadonlyArray<Effect.Effect<A>>): Effect.Effect<ReadonlyArray<A>> =>
  Effect.gen(function*() {
    const results: Array<A> = new Array(sides.length)
    for (let k = 0; k < sides.length; k++) {
      const i = (k + round) % sides.length
      results[i] = yield* sides[i]!
    }
    return results
  })

/**
 * Decode tokens/s from per-token arrival times: the tokens that arrived after the first arrival,
 * over the time since it. (Tokens that came in the same message as the first one were generated
 * before it arrived, so they are not counted: a side that sends several tokens per message is not
 * credited for them.)
 */
const decodeRate = (arrivals: ReadonlyArray<number>) => {
  const first = arrivals[0]
  const after = arrivals.filter((t) => t > first!).length
  return first === undefined || after === 0 ? Number.NaN : perSecond(after, arrivals[arrivals.length - 1]! - first)
}

const modelPath = ensureModel(MODEL_NAME)
const figures: Array<Result.Figure> = []
const skipped: Array<Result.Skipped> = []
const add = (f: Result.Figure) => {
  figures.push(f)
  log(`${f.id}: nativegen ${Report.formatSummary(f.nativegen, f.unit)}, ${f.peerName} ${Report.formatSummary(f.peer, f.unit)}, ratio ${Report.formatSummary(f.ratio)}${f.met === undefined ? "" : f.met ? " (met)" : " (not met)"}`)
}
const paired = (
  fields: Omit<Result.Figure, "nativegen" | "peer" | "ratio" | "met">,
  nativegen: ReadonlyArray<number>,
  peer: ReadonlyArray<number>
) => add(Result.figure({ ...fields, nativegen: summarize(nativegen), peer: summarize(peer), ratio: pairedRatio(nativegen, peer) }))

/** The plain in-process node-llama-cpp loop (bench/_inprocess.ts in its own process): decode tokens/s. */
const inProcess = (promptText: string, tokens: number, threads: number) =>
  promise(async () => {
    const { stdout } = await execFile(process.execPath, [
      "--import", "tsx", Path.join(import.meta.dirname, "_inprocess.ts"),
      modelPath, JSON.stringify(promptText), String(tokens), String(threads), "1"
    ], { env: { ...process.env, UV_THREADPOOL_SIZE: "1" }, encoding: "utf8" })
    const [round] = JSON.parse(stdout.trim().split("\n").pop()!) as Array<{ tokens: number; ms: number }>
    return perSecond(round!.tokens, round!.ms)
  })

interface Peers {
  readonly threads: number
  readonly ng: Nativegen.Served
  readonly ls: LlamaServer.Running | undefined
}

/** llama-server's completion of `messages` (rendered by its own template first, outside the timing). */
const lsComplete = (url: string, messages: ReadonlyArray<Http.ChatRequest["messages"][number]>, maxTokens: number) =>
  promise(async () => Http.streamCompletion(url, { prompt: await Http.applyTemplate(url, messages), maxTokens }))

// ---------------------------------------------------------------------------------------------
// 1. Decode
// ---------------------------------------------------------------------------------------------
const decode = ({ threads, ng, ls }: Peers) =>
  Effect.gen(function*() {
    const socket: Array<number> = []
    const plain: Array<number> = []
    const server: Array<number> = []
    const serverOwn: Array<number> = []
    for (let r = 0; r < ROUNDS; r++) {
      const messages = userPrompt(`decode/${threads}/${r}`, 30)
      const [a, b, c] = yield* rotated(r, [
        Effect.map(Nativegen.generate(ng.provider, { messages, maxTokens: DECODE_TOKENS + 1, sampling: { temperature: 0 } }), (g) => decodeRate(g.arrivals)),
        inProcess(chatMl(messages), DECODE_TOKENS + 1, threads),
        ls === undefined ? Effect.succeed(Number.NaN) : Effect.map(lsComplete(ls.url, messages, DECODE_TOKENS + 1), (s) => {
          serverOwn.push(s.timings?.predictedPerSecond ?? Number.NaN)
          return decodeRate(s.arrivals)
        })
      ])
      socket.push(a!)
      plain.push(b!)
      server.push(c!)
    }
    const common = { unit: "tok/s", threads }
    paired({ ...common, id: `decode.inProcess.t${threads}`, title: "decode through the socket ÷ in-process loop", peerName: "in-process node-llama-cpp", target: { comparison: "atLeast", value: 0.97 } }, socket, plain)
    if (ls !== undefined) {
      paired({
        ...common,
        id: `decode.llamaServer.t${threads}`,
        title: "decode through the socket ÷ llama-server",
        peerName: "llama-server",
        target: { comparison: "atLeast", value: 1 },
        note: `both sides: wall clock over the streamed tokens after the first (${DECODE_TOKENS} tokens); llama-server's own timings.predicted_per_second: ${Report.formatSummary(summarize(serverOwn), "tok/s")}`
      }, socket, server)
    }
  })

// ---------------------------------------------------------------------------------------------
// 2. Prefill, and 3. the follow-up that reuses the long prompt
// ---------------------------------------------------------------------------------------------
interface PrefillTurn {
  readonly rate: number
  readonly firstMs: number
  readonly promptTokens: number
}
interface FollowUpTurn {
  readonly cold: PrefillTurn
  readonly followMs: number
  readonly followTokens: number
  readonly reused: number
}

const prefill = ({ threads, ng, ls }: Peers) =>
  Effect.gen(function*() {
    const [shortWords, longWords] = PREFILL_WORDS as [number, number]
    // The short prompt: one user message, no conversation.
    const short = { ng: [] as Array<PrefillTurn>, ls: [] as Array<PrefillTurn> }
    // The long prompt: turn 1 of a conversation (cold prefill), then its follow-up.
    const long = { ng: [] as Array<FollowUpTurn>, ls: [] as Array<FollowUpTurn> }
    for (let r = 0; r < ROUNDS; r++) {
      const ngShort = Effect.gen(function*() {
        const g = yield* Nativegen.generate(ng.provider, { messages: userPrompt(`prefill/ng/${threads}/${r}`, shortWords), maxTokens: 1, sampling: { temperature: 0 } })
        return { rate: perSecond(g.promptTokens - g.reusedTokens, g.arrivals[0]!), firstMs: g.arrivals[0]!, promptTokens: g.promptTokens }
      })
      const ngLong = Effect.gen(function*() {
        const seed = `long/ng/${threads}/${r}`
        const conversation = `bench-${threads}-${r}`
        const turn1 = history(seed, longWords)
        const first = yield* Nativegen.generate(ng.provider, { messages: turn1, conversation, maxTokens: 4, sampling: { temperature: 0 } })
        const second = yield* Nativegen.generate(ng.provider, {
          messages: followUp(seed, turn1, first.answer, FOLLOW_UP_WORDS),
          conversation,
          ...(first.checkpoint === undefined ? {} : { checkpoint: first.checkpoint }),
          maxTokens: 4,
          sampling: { temperature: 0 }
        })
        return {
          cold: { rate: perSecond(first.promptTokens - first.reusedTokens, first.arrivals[0]!), firstMs: first.arrivals[0]!, promptTokens: first.promptTokens },
          followMs: second.arrivals[0]!,
          followTokens: second.promptTokens,
          reused: second.reusedTokens
        }
      })
      const lsShort = (url: string) =>
        Effect.map(lsComplete(url, userPrompt(`prefill/ls/${threads}/${r}`, shortWords), 1), (s) => ({
          rate: perSecond(s.timings?.promptN ?? Number.NaN, s.arrivals[0]!),
          firstMs: s.arrivals[0]!,
          promptTokens: s.promptTokens ?? Number.NaN
        }))
      const lsLong = (url: string) =>
        Effect.gen(function*() {
          const seed = `long/ls/${threads}/${r}`
          const turn1 = history(seed, longWords)
          const first = yield* lsComplete(url, turn1, 4)
          const second = yield* lsComplete(url, followUp(seed, turn1, first.text, FOLLOW_UP_WORDS), 4)
          return {
            cold: { rate: perSecond(first.timings?.promptN ?? Number.NaN, first.arrivals[0]!), firstMs: first.arrivals[0]!, promptTokens: first.promptTokens ?? Number.NaN },
            followMs: second.arrivals[0]!,
            followTokens: second.promptTokens ?? Number.NaN,
            reused: second.timings?.cacheN ?? Number.NaN
          }
        })
      const [a, b] = yield* rotated(r, [ngShort, ls === undefined ? Effect.succeed(undefined) : lsShort(ls.url)])
      short.ng.push(a as PrefillTurn)
      if (b !== undefined) short.ls.push(b)
      const [c, d] = yield* rotated(r, [ngLong, ls === undefined ? Effect.succeed(undefined) : lsLong(ls.url)])
      long.ng.push(c as FollowUpTurn)
      if (d !== undefined) long.ls.push(d)
    }
    const tokensNote = (xs: ReadonlyArray<{ readonly promptTokens: number }>) => `prompts of ${xs.map((x) => x.promptTokens).join(", ")} tokens`
    const coldNg = long.ng.map((t) => t.cold)
    if (ls !== undefined) {
      const note = "both sides: prompt tokens ÷ time from sending to the first streamed token; "
      paired({ id: `prefill.short.t${threads}`, title: `prefill, ~${shortWords}-token prompt ÷ llama-server`, unit: "tok/s", threads, peerName: "llama-server", target: { comparison: "atLeast", value: 1 }, note: note + tokensNote(short.ng) }, short.ng.map((t) => t.rate), short.ls.map((t) => t.rate))
      paired({ id: `prefill.long.t${threads}`, title: `prefill, ~${longWords}-token prompt ÷ llama-server`, unit: "tok/s", threads, peerName: "llama-server", target: { comparison: "atLeast", value: 1 }, note: note + tokensNote(coldNg) }, coldNg.map((t) => t.rate), long.ls.map((t) => t.cold.rate))
    }
    const followNote = (xs: ReadonlyArray<FollowUpTurn>) =>
      `follow-ups of ${xs.map((x) => `${x.followTokens} tokens reusing ${x.reused}`).join(", ")}; cold = the conversation's first turn (${xs.map((x) => x.cold.promptTokens).join(", ")} tokens), slightly shorter than the follow-up`
    paired({ id: `followUp.cold.t${threads}`, title: "follow-up reusing ~95% of ~4,000 tokens ÷ cold, first token", unit: "ms", threads, peerName: "cold (nativegen)", target: { comparison: "atMost", value: 0.06 }, note: followNote(long.ng) }, long.ng.map((t) => t.followMs), coldNg.map((t) => t.firstMs))
    if (ls !== undefined) {
      paired({ id: `followUp.cold.llamaServer.t${threads}`, title: "llama-server's own follow-up ÷ its cold (reference)", unit: "ms", threads, peerName: "cold (llama-server)", note: followNote(long.ls) + "; cache_prompt on" }, long.ls.map((t) => t.followMs), long.ls.map((t) => t.cold.firstMs))
      paired({ id: `followUp.absolute.t${threads}`, title: "follow-up first token ÷ llama-server's", unit: "ms", threads, peerName: "llama-server", target: { comparison: "atMost", value: 1 } }, long.ng.map((t) => t.followMs), long.ls.map((t) => t.followMs))
    }
  })

// ---------------------------------------------------------------------------------------------
// 4. Concurrent streaming clients
// ---------------------------------------------------------------------------------------------
/** Aggregate generated tokens/s of `CLIENTS` requests started together. */
const together = (requests: ReadonlyArray<Effect.Effect<number>>) =>
  Effect.gen(function*() {
    const start = performance.now()
    const counts = yield* Effect.all(requests, { concurrency: "unbounded" })
    return perSecond(counts.reduce((a, b) => a + b, 0), performance.now() - start)
  })

const concurrent = ({ threads, ng, ls }: Peers) =>
  Effect.gen(function*() {
    // One connection per client, as eight programs would have.
    const providers = yield* Effect.forEach(Array.from({ length: CLIENTS }), () =>
      Effect.map(Layer.build(Client.layer({ socketPath: ng.socket })), (c) => Context.get(c, Provider)).pipe(Effect.orDie))
    for (const tokens of CONCURRENT_TOKENS) {
      const http: Array<number> = []
      const rpc: Array<number> = []
      const server: Array<number> = []
      for (let r = 0; r < ROUNDS; r++) {
        const messages = (side: string, i: number) => userPrompt(`concurrent/${side}/${threads}/${tokens}/${r}/${i}`, 20)
        const viaHttp = (url: string, side: string) =>
          together(Array.from({ length: CLIENTS }, (_, i) =>
            promise(() => Http.streamChat(url, { model: MODEL_NAME, messages: messages(side, i), maxTokens: tokens })).pipe(
              Effect.map((s) => s.completionTokens ?? s.arrivals.length)
            )))
        const viaRpc = together(providers.map((provider, i) =>
          Effect.map(Nativegen.generate(provider, { messages: messages("rpc", i), maxTokens: tokens, sampling: { temperature: 0 } }), (g) => g.generatedTokens)))
        const [a, b, c] = yield* rotated(r, [viaHttp(ng.httpUrl, "http"), viaRpc, ls === undefined ? Effect.succeed(Number.NaN) : viaHttp(ls.url, "ls")])
        http.push(a!)
        rpc.push(b!)
        server.push(c!)
      }
      if (ls === undefined) continue
      const common = { unit: "tok/s", threads, peerName: "llama-server (default slots)", target: { comparison: "atLeast", value: 1 } } as const
      paired({ ...common, id: `concurrent.${tokens}.http.t${threads}`, title: `${CLIENTS} streaming clients, ${tokens}-token requests, HTTP ÷ llama-server` }, http, server)
      paired({ ...common, id: `concurrent.${tokens}.rpc.t${threads}`, title: `${CLIENTS} streaming clients, ${tokens}-token requests, socket ÷ llama-server` }, rpc, server)
    }
  })

// ---------------------------------------------------------------------------------------------
// 5. Latency of a 1-token request over a kept connection, and one-shot from a shell
// ---------------------------------------------------------------------------------------------
const timed = <A>(effect: Effect.Effect<A>) =>
  Effect.gen(function*() {
    const start = performance.now()
    yield* effect
    return performance.now() - start
  })
const medianOf = (effect: Effect.Effect<number>, n: number) =>
  Effect.map(Effect.all(Array.from({ length: n }, () => effect)), (xs) => summarize(xs).median)

const latency = ({ threads, ng, ls }: Peers) =>
  Effect.gen(function*() {
    const messages = userPrompt("latency", 8)
    const rpcOne = timed(Nativegen.generate(ng.provider, { messages, maxTokens: 1, sampling: { temperature: 0 } }))
    const httpOne = (url: string) => timed(promise(() => Http.chatOnce(url, { model: MODEL_NAME, messages, maxTokens: 1 })))
    // Warm every connection (and every side's cache of this prompt) once.
    yield* rpcOne
    yield* httpOne(ng.httpUrl)
    if (ls !== undefined) yield* httpOne(ls.url)
    const rpc: Array<number> = []
    const http: Array<number> = []
    const server: Array<number> = []
    for (let r = 0; r < ROUNDS; r++) {
      const [a, b, c] = yield* rotated(r, [
        medianOf(rpcOne, LATENCY_REQUESTS),
        medianOf(httpOne(ng.httpUrl), LATENCY_REQUESTS),
        ls === undefined ? Effect.succeed(Number.NaN) : medianOf(httpOne(ls.url), LATENCY_REQUESTS)
      ])
      rpc.push(a!)
      http.push(b!)
      server.push(c!)
    }
    if (ls === undefined) return
    const common = { unit: "ms", threads, peerName: "llama-server, kept HTTP connection", target: { comparison: "atMost", value: 1 } } as const
    const note = `each round: the median of ${LATENCY_REQUESTS} sequential requests for 1 token of a 8-word chat`
    paired({ ...common, id: `latency.rpc.t${threads}`, title: "1-token request, kept socket connection ÷ llama-server", note }, rpc, server)
    paired({ ...common, id: `latency.http.t${threads}`, title: "1-token request, kept HTTP connection ÷ llama-server", note }, http, server)
  })

const oneShot = ({ ng, ls }: Peers) =>
  Effect.gen(function*() {
    if (ls === undefined) return
    const body = JSON.stringify({ model: MODEL_NAME, messages: userPrompt("oneshot", 8), max_tokens: 1, temperature: 0 })
    const cli = timed(Effect.flatMap(runCli(["chat", "-n", "1", "-t", "0", "hello there"], { env: ng.home.env }), (r) =>
      r.code === 0 ? Effect.void : Effect.die(new Error(`nativegen chat exited ${r.code}: ${r.stderr}`))))
    const curl = timed(promise(() => execFile("curl", ["-sSf", "-o", "/dev/null", "-H", "content-type: application/json", "-d", body, `${ls.url}/v1/chat/completions`])))
    // Once each first: the servers' caches of this prompt, and the CLI's files in the page cache.
    yield* cli
    yield* curl
    const a: Array<number> = []
    const b: Array<number> = []
    for (let r = 0; r < ROUNDS; r++) {
      const [x, y] = yield* rotated(r, [cli, curl])
      a.push(x!)
      b.push(y!)
    }
    paired({
      id: "latency.oneShot",
      title: "one-shot `nativegen chat -n 1` from a shell ÷ curl to llama-server",
      unit: "ms",
      peerName: "curl",
      target: { comparison: "atMost", value: 500, on: "nativegen" },
      note: "a new process each time; nativegen's CLI runs from the repository (bin/nativegen.js: an esbuild bundle of the sources under .cache/build, checked for changes at each start)"
    }, a, b)
  })

/** A 1-token foreground request during idle preparation: the delay it adds ÷ one prefill chunk. */
const foreground = ({ threads, ng }: Peers) =>
  Effect.gen(function*() {
    const rounds: Array<Foreground.ForegroundRound> = []
    for (let r = 0; r < ROUNDS; r++) rounds.push(yield* Foreground.round(ng.provider, `foreground/${threads}/${r}`, PREPARE_WORDS, PREFILL_CHUNK))
    const landed = rounds.filter((x) => x.landed).length
    paired({
      id: `preparation.foreground.t${threads}`,
      title: "foreground request during idle preparation: added delay ÷ one prefill chunk",
      unit: "ms",
      threads,
      peerName: "one prefill chunk",
      target: { comparison: "atMost", value: 1.5 },
      note: `through the socket: a 1-token request's first token while a ~${PREPARE_WORDS}-token conversation is prepared, minus the same request's on the idle engine, per round; ` +
        `chunk = a preparation alone ÷ its ${PREFILL_CHUNK}-token chunks; the preparation was still running at the first token in ${landed} of ${rounds.length} rounds; ` +
        `idle ${rounds.map((x) => x.idleMs.toFixed(1)).join(", ")} ms, during ${rounds.map((x) => x.duringMs.toFixed(1)).join(", ")} ms`
    }, rounds.map((x) => Math.max(0, x.duringMs - x.idleMs)), rounds.map((x) => x.chunkMs))
  })

// ---------------------------------------------------------------------------------------------
// 6. The runtime's own figures from the existing benchmarks
// ---------------------------------------------------------------------------------------------
const decision = Effect.gen(function*() {
  const { measureDecisionDelay } = yield* promise(() => import("./provider.js"))
  const { idle, loaded } = yield* measureDecisionDelay(ROUNDS).pipe(Effect.orDie)
  const common = {
    unit: "ms",
    threads: 1,
    peerName: "one decode step",
    note: "bench/provider.ts's figure (in-process runtime, the llama `bench` model and the `decision` model)"
  } as const
  // The delay the generation adds: the decision's time mid-generation beyond the same decision's
  // time on the idle engine (its own rendering, tokenizing and scoring), paired by round.
  paired({
    ...common,
    id: "decision.delay",
    title: "decision mid-generation: added delay ÷ one decode step",
    note: `${common.note}: the decision's time mid-generation minus the same decision's on the idle engine, per round`,
    target: { comparison: "atMost", value: 1.5 }
  }, loaded.map((l, i) => Math.max(0, l.delay - idle[i]!.delay)), loaded.map((l) => l.step))
  paired({
    ...common,
    id: "decision.latency",
    title: "decision mid-generation: time to answer ÷ decode step (ref.)"
  }, loaded.map((l) => l.delay), loaded.map((l) => l.step))
  paired({
    ...common,
    id: "decision.idle",
    title: "same decision on an idle engine ÷ decode step (ref.)"
  }, idle.map((i) => i.delay), loaded.map((l) => l.step))
})

const repair = Effect.gen(function*() {
  const { measureRepair } = yield* promise(() => import("./repair.js"))
  const { cold, repaired } = yield* measureRepair(ROUNDS, log)
  paired({
    id: "repair",
    title: "SIGKILL to ready replacement ÷ cold child start",
    unit: "ms",
    threads: 1,
    peerName: "cold start",
    target: { comparison: "atMost", value: 1.2 },
    note: "bench/repair.ts's figure (the `small` and `decision` models)"
  }, repaired, cold)
})

const store = Effect.gen(function*() {
  const { measureStaging } = yield* promise(() => import("./store.js"))
  const stage: Array<number> = []
  const hash: Array<number> = []
  for (let r = 0; r < ROUNDS; r++) {
    const m = yield* promise(() => measureStaging(STORE_MIB))
    stage.push(m.bytes / 2 ** 20 / (m.stageMs / 1000))
    hash.push(m.bytes / 2 ** 20 / (m.sha256sumMs / 1000))
  }
  paired({
    id: "store.staging",
    title: `store staging of ${STORE_MIB} MiB ÷ sha256sum`,
    unit: "MiB/s",
    peerName: "sha256sum",
    target: { comparison: "atLeast", value: 0.9 },
    note: "bench/store.ts's figure: Store.stage (read, hash, write, fsync, link) against sha256sum of the same cached file"
  }, stage, hash)
})

// ---------------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------------
const gitRevision = () => {
  try {
    const rev = ChildProcess.execFileSync("git", ["rev-parse", "HEAD"], { cwd: projectRoot, encoding: "utf8" }).trim()
    const dirty = ChildProcess.execFileSync("git", ["status", "--porcelain", "--untracked-files=no"], { cwd: projectRoot, encoding: "utf8" }).trim() !== ""
    return dirty ? `${rev}+dirty` : rev
  } catch {
    return "unknown"
  }
}
const packageVersion = (dir: string) => (JSON.parse(Fs.readFileSync(Path.join(dir, "package.json"), "utf8")) as { version: string }).version

const program = Effect.gen(function*() {
  const startedAt = new Date().toISOString()
  const before = loadavg()
  log(`peer benchmark: ${ROUNDS} rounds${QUICK ? " (quick)" : ""}, threads ${THREADS.join(",")}, model ${modelPath}`)
  const built = yield* LlamaServer.ensureBuilt(projectRoot).pipe(
    Effect.map((b): LlamaServer.Built | undefined => b),
    Effect.catchTag("LlamaServerUnavailable", (e) =>
      Effect.sync(() => {
        console.log(`${e.message}: the llama-server figures are skipped`)
        skipped.push({ id: "llama-server", reason: e.message })
        return undefined
      }))
  )
  for (const threads of THREADS) {
    yield* Effect.scoped(Effect.gen(function*() {
      log(`${threads} thread(s): starting nativegen serve and llama-server`)
      const ng = yield* Nativegen.serve({ modelPath, modelName: MODEL_NAME, threads, contextSize: CONTEXT, backend: benchBackend })
      const ls = built === undefined
        ? undefined
        : yield* LlamaServer.start(built.binary, { model: modelPath, threads, contextSize: CONTEXT, batchSize: BATCH, gpuLayers: peerGpuLayers }).pipe(Effect.orDie)
      const peers: Peers = { threads, ng, ls }
      if (wanted("decode")) yield* decode(peers)
      if (wanted("prefill")) yield* prefill(peers)
      if (wanted("latency")) yield* latency(peers)
      if (wanted("oneshot") && threads === THREADS[0]) yield* oneShot(peers)
      if (wanted("concurrent")) yield* concurrent(peers)
      if (wanted("foreground")) yield* foreground(peers)
    }))
  }
  if (wanted("decision")) yield* decision
  if (wanted("repair")) yield* repair
  if (wanted("store")) yield* store
  skipped.push(
    { id: "admission.charge", reason: "admission charge against measured memory: measured by `npm run bench admission` (bench/admission.ts), not yet part of this run" }
  )
  const result: Result.PeerResult = {
    schema: 1,
    startedAt,
    finishedAt: new Date().toISOString(),
    gitRevision: gitRevision(),
    settings: { rounds: ROUNDS, quick: QUICK, threads: THREADS, model: MODEL_NAME, modelDigest: sha256File(modelPath), contextSize: CONTEXT },
    machine: { cpu: Os.cpus()[0]?.model ?? "unknown", logicalCpus: Os.availableParallelism(), memoryBytes: Os.totalmem(), os: `${Os.type()} ${Os.release()}`, node: process.version },
    versions: {
      nativegen: packageVersion(projectRoot),
      nodeLlamaCpp: packageVersion(Path.join(projectRoot, "node_modules", "node-llama-cpp")),
      llamaCppRelease: LlamaServer.release(projectRoot),
      llamaServer: { cpuVariant: built?.cpuVariant ?? "not built", cmakeArguments: built?.cmakeArguments ?? [] }
    },
    load: { before, after: loadavg() },
    figures,
    skipped
  }
  const dir = Path.join(import.meta.dirname, "results")
  Fs.mkdirSync(dir, { recursive: true })
  Fs.writeFileSync(Path.join(dir, "peer.json"), Result.encode(result) + "\n")
  Fs.writeFileSync(Path.join(dir, "peer.md"), Report.markdown(result))
  Fs.writeFileSync(Path.join(dir, "peer.svg"), Report.svg(result))
  console.log("\n" + Report.markdown(result))
  log("wrote bench/results/peer.{json,md,svg}")
})

Effect.runPromise(program).then(() => process.exit(0), (e) => {
  console.error(e)
  process.exit(1)
})
