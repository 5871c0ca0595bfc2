/**
 * A development tool (not a figure): what a clustered runner's own path costs a turn it serves
 * itself, apart from the engine and the sockets. `node --import tsx bench/_cluster-local-path.ts
 * [turns]` builds one runner in this process (Runner.layer over SQLite in a temporary directory)
 * over a Provider that answers at once (one Text chunk, then Done), waits until it holds every
 * shard, and times turns of conversations it holds through the routing Provider (the cluster
 * path: routing, the entity call through Sharding, the entity's handler, stamp, coalesce, the
 * in-process push to its own sink, the inbox, the exactly-once check) beside the same turns on
 * the answering Provider itself. Alternating rounds; medians of the first chunk and the whole turn,
 * and CPU µs per turn. With `--cpu-prof` node writes a profile of it.
 */
import { Sharding } from "@effect/cluster/Sharding"
import * as ShardId from "@effect/cluster/ShardId"
import { RunnerAddress } from "@effect/cluster/RunnerAddress"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Stream from "effect/Stream"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Runner from "../src/cluster/Runner.js"
import type { GenerateChunk, GenerateRequest, Readiness } from "../src/domain/Inference.js"
import { Conversations } from "../src/services/Conversations.js"
import { Provider } from "../src/services/Provider.js"

const TURNS = Number(process.argv[2] ?? 400)
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
    timings: { queueMillis: 0, firstTokenMillis: 0, decodeTokensPerSecond: 0, totalMillis: 0 }
  }
]

const unused = () => Effect.die("not used by this tool")
const answering = Provider.of({
  generate: () => Stream.fromIterable(answer),
  decide: unused,
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

const program = Effect.gen(function*() {
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "nglocal-"))
  const context = yield* Layer.build(
    Runner.layer({
      address: RunnerAddress.make({ host: Path.join(dir, "r1.sock"), port: 0 }),
      storage: { _tag: "Sqlite", file: Path.join(dir, "cluster.db") },
      detection: "3 seconds",
      shards: SHARDS
    }).pipe(Layer.provide(Layer.mergeAll(Layer.succeed(Provider, answering), Layer.succeed(Conversations, conversations))))
  )
  const routing = Context.get(context, Provider)
  const sharding = Context.get(context, Sharding)
  // Until this runner holds every shard (its only runner).
  while (!Array.from({ length: SHARDS }, (_, i) => sharding.hasShardId(ShardId.make("default", i + 1))).every(Boolean)) {
    yield* Effect.sleep("50 millis")
  }
  const request = (i: number): GenerateRequest => ({ conversation: `c${i % 16}`, messages: [{ role: "user", content: "hello" }] })

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

  yield* timed(routing)
  const format = (r: { first: number; whole: number; cpu: number }) =>
    `first chunk ${r.first.toFixed(3)} ms, whole ${r.whole.toFixed(3)} ms, CPU ${r.cpu.toFixed(0)} µs/turn`
  for (let round = 1; round <= ROUNDS; round++) {
    const plain = yield* timed(answering)
    const clustered = yield* timed(routing)
    console.log(`round ${round}: answering Provider: ${format(plain)}\n         cluster path:      ${format(clustered)}`)
  }
  Fs.rmSync(dir, { recursive: true, force: true })
})

Effect.runPromise(program.pipe(Effect.scoped, Logger.withMinimumLogLevel(LogLevel.Warning))).then(
  () => process.exit(0),
  (error) => {
    console.error(error)
    process.exit(1)
  }
)
