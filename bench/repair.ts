/**
 * Time from SIGKILL of the engine child to a ready (loaded, warmed) replacement, against a cold
 * start of the same worker (spawn, hello, load both roles, warm), alternating in one run.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Stream from "effect/Stream"
import { ensureModel } from "../fixtures/models.js"
import { benchBackend, benchModel } from "./_target.js"
import * as NativeWorker from "../src/services/NativeWorker.js"
import { isMain } from "./peer/Main.js"

const ROUNDS = 3
const config = NativeWorker.NativeWorkerConfig.layer({
  child: { backend: benchBackend, threads: 1, batchSize: 512 },
  models: {
    generation: { modelPath: ensureModel(benchModel("small")), contextSize: 2048 },
    decision: { modelPath: ensureModel("decision"), contextSize: 1024 }
  },
  stopTimeout: Duration.seconds(5)
})
const WorkerLive = Layer.fresh(NativeWorker.layer).pipe(Layer.provide(NativeWorker.hooksNoop), Layer.provide(config))

const coldStart = Effect.scoped(Effect.gen(function*() {
  const start = performance.now()
  yield* Layer.build(WorkerLive)
  return performance.now() - start
}))

const repair = Effect.scoped(Effect.gen(function*() {
  const context = yield* Layer.build(WorkerLive)
  const worker = context.unsafeMap.get(NativeWorker.NativeWorker.key) as NativeWorker.NativeWorker["Type"]
  const before = yield* worker.readiness
  const start = performance.now()
  process.kill(before.pid!, "SIGKILL")
  yield* worker.states.pipe(
    Stream.mapEffect(() => worker.readiness),
    Stream.filter((r) => r.state === "ready" && r.incarnation > before.incarnation),
    Stream.runHead
  )
  return performance.now() - start
}))

/** Cold start and SIGKILL-to-ready times (ms), `rounds` of each, alternating. */
export const measureRepair = (rounds: number, log: (line: string) => void = () => {}) =>
  Effect.gen(function*() {
    const cold: Array<number> = []
    const repaired: Array<number> = []
    for (let r = 0; r < rounds; r++) {
      cold.push(yield* coldStart)
      repaired.push(yield* repair)
      log(`round ${r + 1}: cold start ${cold[r]!.toFixed(0)} ms, SIGKILL -> ready ${repaired[r]!.toFixed(0)} ms`)
    }
    return { cold, repaired }
  })

const program = Effect.gen(function*() {
  const { cold, repaired } = yield* measureRepair(ROUNDS, console.log)
  const mean = (xs: Array<number>) => xs.reduce((a, b) => a + b, 0) / xs.length
  console.log(`mean: cold ${mean(cold).toFixed(0)} ms, repair ${mean(repaired).toFixed(0)} ms, ratio repair/cold ${(mean(repaired) / mean(cold)).toFixed(3)}`)
})

if (isMain(import.meta.url)) {
  Effect.runPromise(program).catch((e) => {
    console.error(e)
    process.exit(1)
  })
}
