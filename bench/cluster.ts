/**
 * What a hop through the cluster costs: two `nativegen serve --cluster` runners on this machine
 * (Unix sockets by default, BENCH_CLUSTER_TRANSPORT=tcp for loopback TCP with noDelay), one
 * SQLite runner storage, and a plain `nativegen serve` (no cluster: "one machine"), all with
 * qwen-chat at 1 thread. A client runs two-turn conversations: on runner 1's public socket, some
 * owned by runner 1 (local: served in the entry, no hop) and some by runner 2 (remote: forwarded
 * over the cluster and streamed back); and the same turns on the plain server's socket (single).
 * Each round runs the three in a rotating order.
 *
 * Per follow-up turn (a continuation: the KV is on the owner), measured at the client: the time
 * to the first Text chunk, and the whole stream; and from the Done chunk, the owner's own
 * first-token and total times. The hop's cost is what the client waited beyond the owner's
 * times, per request (at the first token) and per generated token (over the stream). Issue 20's
 * target: a follow-up's first token through a remote runner within 1.1x of the same on one
 * machine (remote ÷ single); remote ÷ local is the hop alone. And the CPU the follow-up cost per
 * generated token (from /proc: the server processes and the engine children apart; both runners
 * for local and remote, the plain server for single), which a loaded machine disturbs less than
 * wall times.
 *
 * BENCH_CLUSTER_ROUNDS (default 6), BENCH_CLUSTER_TOKENS (generated per turn, default 32),
 * BENCH_CLUSTER_POSTGRES (a server URL: runner storage on PostgreSQL instead of SQLite),
 * BENCH_CLUSTER_HOLD (the runners' --cluster-hold in ms; default theirs, 0), BENCH_CLUSTER_DETECTION
 * (the runners' --cluster-detection in seconds; default theirs, 3: what the runners' periodic
 * storage work and pings cost the hop), BENCH_CLUSTER_MODEL (a fixture model all three serve,
 * e.g. qwen-bench; default the packaged seed, qwen-chat).
 * Results: bench/results/cluster-unix.json or cluster-tcp.json.
 */
import * as Chunk from "effect/Chunk"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Stream from "effect/Stream"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Runner from "../src/cluster/Runner.js"
import type { ChatMessage, GenerateChunk, GenerateRequest } from "../src/domain/Inference.js"
import * as Client from "../src/rpc/Client.js"
import { Provider } from "../src/services/Provider.js"
import { clusterStorage, cpuBetween, cpuOfTree, loadavg, type Served, ownedBy, serve, settled, storageKind, summary, withModel, writeResult } from "./_cluster.js"

const ROUNDS = Number(process.env.BENCH_CLUSTER_ROUNDS ?? 6)
const TOKENS = Number(process.env.BENCH_CLUSTER_TOKENS ?? 32)
const TCP = process.env.BENCH_CLUSTER_TRANSPORT === "tcp"
/** The runners' --cluster-hold (ms): how long an owner holds a remote stream's chunks after the first. */
const HOLD = process.env.BENCH_CLUSTER_HOLD
const DETECTION = process.env.BENCH_CLUSTER_DETECTION
const MODEL = process.env.BENCH_CLUSTER_MODEL
const SHARDS = 12

type Where = "local" | "remote" | "single"

interface Sample {
  readonly where: Where
  readonly round: number
  /** Client: submit to the first Text chunk; owner: the Done chunk's firstTokenMillis. */
  readonly clientFirst: number
  readonly ownerFirst: number
  readonly clientTotal: number
  readonly ownerTotal: number
  readonly tokens: number
  /** CPU ms of the follow-up turn (from /proc), per generated token: the servers' and the engines', all processes together. */
  readonly serverCpuPerToken: number
  readonly engineCpuPerToken: number
}

const timedTurn = (provider: Provider["Type"], request: GenerateRequest) =>
  Effect.gen(function*() {
    const start = performance.now()
    let first: number | undefined
    const chunks = Chunk.toArray(yield* Stream.runCollect(provider.generate(request).pipe(
      Stream.tap((c) => Effect.sync(() => {
        if (first === undefined && c._tag === "Text") first = performance.now()
      }))
    )))
    const end = performance.now()
    const done = chunks.at(-1)
    if (done?._tag !== "Done") return yield* Effect.dieMessage("no Done chunk")
    return { chunks, done, first: (first ?? end) - start, total: end - start }
  })

const answerOf = (chunks: ReadonlyArray<GenerateChunk>) =>
  chunks.map((c) => (c._tag === "Text" && c.channel === "answer" ? c.text : "")).join("")

const settings = { maxTokens: TOKENS, sampling: { temperature: 0 }, thinking: false } as const

const followUp = (provider: Provider["Type"], conversation: string, where: Where, round: number, servers: ReadonlyArray<Served>) =>
  Effect.gen(function*() {
    const user1: ChatMessage = { role: "user", content: `round ${round}: tell me about the sea and the ships on it` }
    const one = yield* timedTurn(provider, { messages: [user1], conversation, ...settings })
    const before = servers.map((s) => cpuOfTree(s.pid))
    const two = yield* timedTurn(provider, {
      messages: [user1, { role: "assistant", content: answerOf(one.chunks) }, { role: "user", content: "and the harbor?" }],
      conversation,
      checkpoint: one.done.checkpoint!,
      ...settings
    })
    const used = servers.map((s, i) => cpuBetween(before[i]!, cpuOfTree(s.pid)))
    if (two.done.usage.reuse !== "continuation") return yield* Effect.dieMessage(`${where} follow-up reuse ${two.done.usage.reuse}`)
    const sample: Sample = {
      where,
      round,
      clientFirst: two.first,
      ownerFirst: two.done.timings.firstTokenMillis,
      clientTotal: two.total,
      ownerTotal: two.done.timings.totalMillis,
      tokens: two.done.usage.generatedTokens,
      serverCpuPerToken: used.reduce((n, u) => n + u.server, 0) / Math.max(1, two.done.usage.generatedTokens),
      engineCpuPerToken: used.reduce((n, u) => n + u.engine, 0) / Math.max(1, two.done.usage.generatedTokens)
    }
    return sample
  })

const main = Effect.gen(function*() {
  const dir = yield* Effect.acquireRelease(
    Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "ngb-"))),
    (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
  )
  const { arg: storage, spec } = yield* clusterStorage(dir, "hop")
  const hold: Record<string, string> = {
    ...(HOLD === undefined ? {} : { NATIVEGEN_CLUSTER_HOLD: HOLD }),
    ...(DETECTION === undefined ? {} : { NATIVEGEN_CLUSTER_DETECTION: DETECTION })
  }
  const addresses = TCP ? ["127.0.0.1:34531", "127.0.0.1:34532"] : [Path.join(dir, "r1.sock"), Path.join(dir, "r2.sock")]
  const model = (name: string) => MODEL === undefined ? Effect.succeed({}) : withModel(dir, name, MODEL)
  const [r1, r2, single] = yield* Effect.all([
    Effect.flatMap(model("r1"), (env) => serve(dir, "r1", { address: addresses[0]!, storage, shards: SHARDS }, 1, { ...hold, ...env })),
    Effect.flatMap(model("r2"), (env) => serve(dir, "r2", { address: addresses[1]!, storage, shards: SHARDS }, 1, { ...hold, ...env })),
    Effect.flatMap(model("single"), (env) => serve(dir, "single", undefined, 1, env))
  ], { concurrency: "unbounded" })
  const provider = Context.get(yield* Layer.build(Client.layer({ socketPath: r1.socket })), Provider)
  const plain = Context.get(yield* Layer.build(Client.layer({ socketPath: single.socket })), Provider)
  const view = yield* Layer.build(Runner.layerClientOnly({ storage: spec, shards: SHARDS }))
  const snapshot = yield* settled([r1.stored!, r2.stored!], SHARDS).pipe(Effect.provide(view))

  const orders: ReadonlyArray<ReadonlyArray<Where>> = [["local", "remote", "single"], ["remote", "single", "local"], ["single", "local", "remote"]]
  const samples: Array<Sample> = []
  for (let round = 0; round < ROUNDS; round++) {
    for (const where of orders[round % orders.length]!) {
      const id = where === "single"
        ? `bench-single-${round}`
        : yield* ownedBy(snapshot, where === "local" ? r1.stored! : r2.stored!, `bench-${where}-${round}`).pipe(Effect.provide(view))
      samples.push(yield* followUp(where === "single" ? plain : provider, id, where, round, where === "single" ? [single] : [r1, r2]).pipe(
        Effect.timeoutFail({ duration: "180 seconds", onTimeout: () => new Error(`${where} conversation ${id} not served within 180 s (storage stalled? see docs/cluster.md)`) }),
        Effect.orDie
      ))
    }
  }

  const row = (where: Where) => {
    const s = samples.filter((x) => x.where === where)
    return {
      first: summary(s.map((x) => x.clientFirst)),
      ownerFirst: summary(s.map((x) => x.ownerFirst)),
      hopFirst: summary(s.map((x) => x.clientFirst - x.ownerFirst)),
      perToken: summary(s.map((x) => (x.clientTotal - x.ownerTotal) / Math.max(1, x.tokens))),
      decode: summary(s.map((x) => (x.clientTotal - x.clientFirst) / Math.max(1, x.tokens - 1))),
      serverCpuPerToken: summary(s.map((x) => x.serverCpuPerToken)),
      engineCpuPerToken: summary(s.map((x) => x.engineCpuPerToken))
    }
  }
  /** Per round (the three side by side), a ratio of client first-token times; its median and range. */
  const ratio = (a: Where, b: Where) =>
    summary(Array.from({ length: ROUNDS }, (_, round) => {
      const at = (w: Where) => samples.find((x) => x.round === round && x.where === w)!.clientFirst
      return at(a) / at(b)
    }))
  const rows = { local: row("local"), remote: row("remote"), single: row("single") }
  const ratios = { remoteOverSingle: ratio("remote", "single"), remoteOverLocal: ratio("remote", "local"), localOverSingle: ratio("local", "single") }
  const f = (n: number) => n.toFixed(2)
  const r = (s: ReturnType<typeof summary>) => `${f(s.median)} [${f(s.min)}–${f(s.max)}]`
  const load = loadavg()
  console.log(`transport ${TCP ? "tcp (noDelay)" : "unix"}, ${storageKind} runner storage, ${ROUNDS} rounds, ${TOKENS} tokens per turn, hold ${HOLD ?? 0} ms, detection ${DETECTION ?? 3} s, model ${MODEL ?? "qwen-chat (seed)"}, load ${load.join(" ")}`)
  console.log("medians [range], ms   first token            owner's first         hop at first        hop per token       client ms/token")
  for (const [name, x] of Object.entries(rows)) {
    console.log(`${name.padEnd(8)}  ${[x.first, x.ownerFirst, x.hopFirst, x.perToken, x.decode].map((s) => r(s).padEnd(20)).join("  ")}`)
  }
  console.log(`follow-up first token, per round: remote ÷ single ${r(ratios.remoteOverSingle)} (target ≤ 1.1); remote ÷ local ${r(ratios.remoteOverLocal)}; local ÷ single ${r(ratios.localOverSingle)}`)
  console.log(`CPU ms per token of the follow-up (servers / engines; local and remote: both runners, single: the plain server): ` +
    Object.entries(rows).map(([name, x]) => `${name} ${r(x.serverCpuPerToken)} / ${r(x.engineCpuPerToken)}`).join("; "))
  console.log(`added by the hop (remote − local medians): ${f(rows.remote.hopFirst.median - rows.local.hopFirst.median)} ms at the first token, ${f(rows.remote.perToken.median - rows.local.perToken.median)} ms per token`)
  writeResult(`cluster-${TCP ? "tcp" : "unix"}`, {
    transport: TCP ? "tcp" : "unix",
    storage: storageKind,
    model: MODEL ?? "qwen-chat",
    rounds: ROUNDS,
    tokens: TOKENS,
    holdMillis: Number(HOLD ?? 0),
    loadavgAtEnd: load,
    cpus: Os.cpus().length,
    rows,
    ratios,
    samples
  })
})

Effect.runPromise(Effect.scoped(main)).then(() => process.exit(0), (error) => {
  console.error(error)
  process.exit(1)
})
