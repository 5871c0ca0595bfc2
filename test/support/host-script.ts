/**
 * A stand-alone host for process-death tests: starts a worker, prints the engine child's pid on
 * stdout, then waits until killed.
 */
import * as Effect from "effect/Effect"
import { NativeWorker } from "../../src/services/NativeWorker.js"
import { workerLayer } from "./engine.js"

const program = Effect.gen(function*() {
  const worker = yield* NativeWorker
  const { pid } = yield* worker.readiness
  process.stdout.write(`${pid}\n`)
  return yield* Effect.never
})

Effect.runFork(program.pipe(Effect.provide(workerLayer({ models: {} }))))
