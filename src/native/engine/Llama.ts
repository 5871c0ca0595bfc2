/**
 * The engine's llama.cpp binding: one `Llama` for the engine's life, acquired in its scope and
 * disposed when the scope closes, and `step`, the only way the engine modules call into it. Each
 * native call runs as one atomic step through the step gate, in lane order (decision first), so a
 * decision submitted between two steps of a generation runs at the next step boundary, and an
 * interrupted step always completes before the interruption takes effect: the native engine is
 * never left mid-call.
 */
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import { getLlama, type Llama, LlamaLogLevel } from "node-llama-cpp"
import { EngineFailure } from "../../domain/EngineError.js"
import type { Backend, Lane } from "../Protocol.js"
import * as StepGate from "../StepGate.js"
import { reasonOf } from "./Checks.js"

export interface EngineOptions {
  readonly backend: Backend
  readonly threads: number
  /** Largest batch evaluated in one native call; prefill chunks never exceed it. */
  readonly batchSize: number
}

export interface Native {
  readonly llama: Llama
  readonly options: EngineOptions
  /** Layers offloaded to the GPU: none on the CPU backend, all (more than any model has) otherwise. */
  readonly gpuLayers: number
  /** Runs one native call atomically, in lane order at the gate; interruption waits for the step. */
  readonly step: <A>(operation: string, run: () => Promise<A>, lane?: Lane) => Effect.Effect<A, EngineFailure>
}

export const make = (options: EngineOptions): Effect.Effect<Native, EngineFailure, Scope.Scope> =>
  Effect.gen(function*() {
    const llama = yield* Effect.acquireRelease(
      Effect.tryPromise({
        try: () =>
          getLlama({
            build: "never",
            gpu: options.backend === "cpu" ? false : options.backend,
            maxThreads: options.threads,
            logLevel: LlamaLogLevel.error,
            progressLogs: false
          }),
        catch: (cause) => new EngineFailure({ operation: "getLlama", reason: reasonOf(cause) })
      }),
      (llama) => Effect.promise(() => llama.dispose())
    )
    const gate = yield* StepGate.make
    const step = <A>(operation: string, run: () => Promise<A>, lane: Lane = "foreground") =>
      gate.run(
        lane,
        Effect.uninterruptible(
          Effect.tryPromise({ try: run, catch: (cause) => new EngineFailure({ operation, reason: reasonOf(cause) }) })
        )
      )
    return { llama, options, gpuLayers: llama.gpu === false ? 0 : 1_000, step }
  })
