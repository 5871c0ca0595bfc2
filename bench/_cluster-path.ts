/**
 * A development tool (not a figure): what the cluster's own path costs a turn, apart from the
 * engine. `node --import tsx bench/_cluster-path.ts [turns] [remote]` builds a runner in this
 * process (Runner.layer over SQLite in a temporary directory) over a Provider that answers at once
 * (one Text chunk, then Done), and times turns through the routing Provider beside the same turns
 * on the answering Provider itself (alternating rounds; medians of the first chunk and the whole
 * turn, and this process's CPU µs per turn; with `--cpu-prof` node writes a profile of it).
 *
 * - local (default): the runner is alone and holds every shard; its turns take the cluster path in
 *   process (routing, the entity call through Sharding, the entity's handler, the in-process push
 *   to its own sink, the inbox, the exactly-once check).
 * - remote: a second runner over the same storage in a child process (this file with `owner`)
 *   takes half the shards, and the turns are of conversations it holds: sent straight to its sink
 *   once the load answers name it (or through Sharding before), their chunks pushed back.
 *
 * CHECKPOINT=1: the answer's Done carries a checkpoint, so each turn records its transcript in the
 * runner storage before Done passes on (as a real turn does; the Text and Done here are one chunk,
 * so the first chunk waits for the write too).
 * DECISIONS=1 (with remote): times decisions instead, one after another to the owner by each of
 * the entry's two routes: through the cluster (the work entity of one of its shards) and straight
 * to its sink (`ServeDecision`), beside the answering Provider's own.
 * DETECTION_SECONDS: the runners' --cluster-detection (default 3). With IDLE_SECONDS set it times
 * no turn: it waits that long once the shards are placed and prints this runner's CPU at rest per
 * thread (main: the event loop; the others: V8's workers, libuv, the SQLite driver), from /proc.
 */
import { Sharding } from "@effect/cluster/Sharding"
import * as ShardId from "@effect/cluster/ShardId"
import { RunnerAddress } from "@effect/cluster/RunnerAddress"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Stream from "effect/Stream"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Crypto from "node:crypto"
import * as Path from "node:path"
import { threadCpu } from "./_proccpu.js"
import { conversationShard } from "../src/cluster/ConversationEntity.js"
import * as Runner from "../src/cluster/Runner.js"
import { layerPusher, SinkClients, sinkListenAddress, TurnSink } from "../src/cluster/ChunkChannel.js"
import { idsByShard, Work } from "../src/cluster/WorkEntity.js"
import type { DecideRequest, DecideResult, GenerateChunk, GenerateRequest, Readiness } from "../src/domain/Inference.js"
import { Conversations } from "../src/services/Conversations.js"
import { Provider } from "../src/services/Provider.js"

const TURNS = Number(process.argv[2] ?? 400)
const REMOTE = process.argv[3] === "remote"
const ROUNDS = 5
const SHARDS = 12

const readiness: Readiness = {
  state: "ready",
  reason: null,
  engine: { incarnation: 1, pid: null, backend: null, nodeLlamaCppVersion: null, uptimeMillis: 0 },
  budget: null,
  roles: [],
  scheduler: { running: 0, queued: 0, slots: 4, conversations: 0 },
  recoveryActions: []
}

const answer: ReadonlyArray<GenerateChunk> = [
  { _tag: "Text", channel: "answer", text: " hi", tokens: [7] },
  {
    _tag: "Done",
    stopReason: "maxTokens",
    usage: { promptTokens: 10, reusedTokens: 9, generatedTokens: 1, reuse: "continuation" },
    timings: { queueMillis: 0, firstTokenMillis: 0, decodeTokensPerSecond: 0, totalMillis: 0 },
    ...(process.env.CHECKPOINT === "1" ? { checkpoint: { conversation: "c", tokens: 11, hash: "0123456789abcdef" } } : {})
  }
]

const decision: DecideResult = {
  heads: [{ name: "h", labels: [{ label: "yes", probability: 1, rank: 1, logLikelihood: 0 }] }],
  promptTokens: 4,
  queueMillis: 0,
  totalMillis: 0
}
const decideRequest: DecideRequest = { prompt: "is it?", heads: [{ name: "h", labels: ["yes", "no"] }] }

const unused = () => Effect.die("not used by this tool")
const answering = Provider.of({
  generate: () => Stream.fromIterable(answer),
  decide: () => Effect.succeed(decision),
  count: unused,
  tokenize: unused,
  prepare: unused,
  readiness: Effect.succeed(readiness),
  readinessChanges: Stream.make(readiness)
})
const conversations = Conversations.of({
  verify: unused,
  attach: unused,
  record: unused,
  recordPrepared: unused,
  held: () => undefined,
  handOver: () => Effect.void
})

const median = (values: ReadonlyArray<number>) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!

/** A runner named `name` in `dir` over the answering Provider. */
const runner = (dir: string, name: string) =>
  Runner.layer({
    address: RunnerAddress.make({ host: Path.join(dir, `${name}.sock`), port: 0 }),
    storage: { _tag: "Sqlite", file: Path.join(dir, "cluster.db") },
    detection: Duration.seconds(Number(process.env.DETECTION_SECONDS ?? 3)),
    shards: SHARDS
  }).pipe(Layer.provide(Layer.mergeAll(Layer.succeed(Provider, answering), Layer.succeed(Conversations, conversations))))

const heldShards = (sharding: Sharding["Type"]) =>
  Array.from({ length: SHARDS }, (_, i) => sharding.hasShardId(ShardId.make("default", i + 1))).filter(Boolean).length

/** This runner at rest for `seconds`: CPU ms per second, per thread. */
const idle = (seconds: number) =>
  Effect.gen(function*() {
    yield* Effect.sleep("5 seconds")
    const before = threadCpu(process.pid)
    const start = performance.now()
    yield* Effect.sleep(Duration.seconds(seconds))
    const elapsed = (performance.now() - start) / 1000
    let total = 0
    for (const [tid, { ms, name }] of threadCpu(process.pid)) {
      const used = ms - (before.get(tid)?.ms ?? 0)
      total += used
      // The main thread's id is the pid.
      if (used > 0) console.log(`${tid === process.pid ? "main" : `${name} ${tid}`}: ${(used / elapsed).toFixed(1)} CPU ms/s`)
    }
    console.log(`at rest: ${(total / elapsed).toFixed(1)} CPU ms/s over ${elapsed.toFixed(0)} s`)
  })

/** Decisions to the owner (in the child) by each route, `TURNS` one after another per round: median ms and CPU µs per decision. */
const decisions = (context: Context.Context<Sharding>, dir: string) =>
  Effect.gen(function*() {
    const sharding = Context.get(context, Sharding)
    // A pusher of its own (the runner's is internal): it only calls the owner's sink.
    const ownSink = TurnSink.of({
      address: RunnerAddress.make({ host: Path.join(dir, "none"), port: 0 }),
      open: () => Effect.dieMessage("not used by this tool"),
      deliver: () => Effect.succeed(false),
      directTurns: () => 0
    })
    const clients = Context.get(yield* Layer.build(layerPusher.pipe(Layer.provide(Layer.succeed(TurnSink, ownSink)))), SinkClients)
    const work = yield* Effect.provide(Work.client, context)
    const remoteId = idsByShard(sharding, SHARDS).find((_, i) => !sharding.hasShardId(ShardId.make("default", i + 1)))!
    const ownerSink = sinkListenAddress(RunnerAddress.make({ host: Path.join(dir, "owner.sock"), port: 0 }))
    const routes = {
      answering: answering.decide(decideRequest),
      cluster: Effect.suspend(() => work(remoteId).Decide({ id: Crypto.randomUUID(), request: decideRequest })),
      direct: Effect.suspend(() => clients.serveDecision(ownerSink, { id: Crypto.randomUUID(), request: decideRequest }))
    }
    const timed = (route: Effect.Effect<DecideResult, unknown>) =>
      Effect.gen(function*() {
        const times: Array<number> = []
        const cpu = process.cpuUsage()
        for (let i = 0; i < TURNS; i++) {
          const start = performance.now()
          yield* Effect.orDie(route)
          times.push(performance.now() - start)
        }
        const used = process.cpuUsage(cpu)
        return `${median(times).toFixed(3)} ms, CPU ${((used.user + used.system) / TURNS).toFixed(0)} µs`
      })
    yield* timed(routes.cluster)
    yield* timed(routes.direct)
    for (let round = 1; round <= ROUNDS; round++) {
      const line = []
      for (const [name, route] of Object.entries(routes)) line.push(`${name} ${yield* timed(route)}`)
      console.log(`round ${round}: decision ${line.join("; ")}`)
    }
  })

const program = Effect.gen(function*() {
  const dir = yield* Effect.acquireRelease(
    Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "ngpath-"))),
    (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
  )
  if (REMOTE) {
    const owner = ChildProcess.spawn(process.execPath, [...process.execArgv, import.meta.filename, "owner", dir], { stdio: "inherit" })
    yield* Effect.addFinalizer(() => Effect.sync(() => owner.kill("SIGKILL")))
  }
  const context = yield* Layer.build(runner(dir, "entry"))
  const routing = Context.get(context, Provider)
  const sharding = Context.get(context, Sharding)
  // Until the shards are placed: all of them here, or half with the owner.
  const wanted = REMOTE ? SHARDS / 2 : SHARDS
  while (heldShards(sharding) !== wanted) yield* Effect.sleep("50 millis")
  const ids = Array.from({ length: 400 }, (_, i) => `c${i}`)
    .filter((id) => sharding.hasShardId(conversationShard(sharding, id)) !== REMOTE)
    .slice(0, 16)
  const request = (i: number): GenerateRequest => ({ conversation: ids[i % ids.length]!, messages: [{ role: "user", content: "hello" }] })

  /** `TURNS` turns one after another: per turn, ms to the first chunk and to the end; CPU µs per turn. */
  const timed = (provider: Provider["Type"]) =>
    Effect.gen(function*() {
      const first: Array<number> = []
      const whole: Array<number> = []
      const cpu = process.cpuUsage()
      for (let i = 0; i < TURNS; i++) {
        const start = performance.now()
        let firstAt = 0
        yield* Stream.runForEach(provider.generate(request(i)), () => Effect.sync(() => {
          if (firstAt === 0) firstAt = performance.now()
        }))
        first.push(firstAt - start)
        whole.push(performance.now() - start)
      }
      const used = process.cpuUsage(cpu)
      return { first: median(first), whole: median(whole), cpu: (used.user + used.system) / TURNS }
    })

  if (process.env.IDLE_SECONDS !== undefined) return yield* idle(Number(process.env.IDLE_SECONDS))
  if (REMOTE && process.env.DECISIONS === "1") return yield* decisions(context, dir)
  // Warm: the entities started, and (remote) the load answers naming the owner's sink.
  yield* timed(routing)
  yield* Effect.sleep("3 seconds")
  yield* timed(routing)
  const format = (r: { first: number; whole: number; cpu: number }) =>
    `first chunk ${r.first.toFixed(3)} ms, whole ${r.whole.toFixed(3)} ms, CPU ${r.cpu.toFixed(0)} µs/turn`
  for (let round = 1; round <= ROUNDS; round++) {
    const plain = yield* timed(answering)
    const clustered = yield* timed(routing)
    console.log(`round ${round}: answering Provider: ${format(plain)}\n         cluster path:      ${format(clustered)}`)
  }
})

if (process.argv[2] === "owner") {
  // The remote runner: serves until killed.
  Effect.runFork(Layer.launch(runner(process.argv[3]!, "owner")).pipe(Logger.withMinimumLogLevel(LogLevel.Warning)))
} else {
  Effect.runPromise(program.pipe(Effect.scoped, Logger.withMinimumLogLevel(LogLevel.Warning))).then(
    () => process.exit(0),
    (error) => {
      console.error(error)
      process.exit(1)
    }
  )
}
