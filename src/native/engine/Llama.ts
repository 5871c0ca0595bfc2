/**
 * The engine's llama.cpp binding: one `Llama` for the engine's life, acquired in its scope and
 * disposed when the scope closes, and `step`, the only way the engine modules call into it. Each
 * native call runs as one atomic step through the step gate, in lane order (decision first), so a
 * decision submitted between two steps of a generation runs at the next step boundary, and an
 * interrupted step always completes before the interruption takes effect: the native engine is
 * never left mid-call. `decodeStep` is a step that batches: the decode steps of generations that
 * are ready at the same boundary start together and node-llama-cpp evaluates them in one native
 * batch (StepGate.ts); `batching` is the context option that lets it, and counts the native
 * batches it dispatches. A step also sets the thread count its native calls run at: a lone decode
 * step at the decode threads, every other step (prefill, scoring, a batch of decode steps) at the
 * evaluation threads.
 */
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import { getLlama, type Llama, LlamaLogLevel } from "node-llama-cpp"
import { EngineFailure } from "../../domain/EngineError.js"
import * as Os from "node:os"
import { resolveDecodeThreads, type Threads } from "../ChildSettings.js"
import type { Backend, Lane } from "../Protocol.js"
import * as StepGate from "../StepGate.js"
import { reasonOf } from "./Checks.js"

export interface EngineOptions {
  readonly backend: Backend
  /** A count, or "auto": llama.cpp's math cores for this machine (`Native.threads` is the count used). */
  readonly threads: Threads
  /** Threads of decode steps: "auto" (default) or a count (`resolveDecodeThreads`). */
  readonly decodeThreads?: Threads | undefined
  /** Largest batch evaluated in one native call; prefill chunks never exceed it. */
  readonly batchSize: number
  /** Decode steps of concurrent generations as one native batch (default true); false: one step each. */
  readonly batchDecode?: boolean | undefined
}

/** Raised when the caller of a stoppable step is interrupted (a cancel): read between native calls. */
export interface StopRequest {
  readonly requested: boolean
}

export interface Native {
  readonly llama: Llama
  readonly options: EngineOptions
  /** Evaluation threads of every context: the configured count, or the machine's math cores for "auto". */
  readonly threads: number
  /** Threads of decode steps (every other native call uses `threads`). */
  readonly decodeThreads: number
  /** Layers offloaded to the GPU: none on the CPU backend, all (more than any model has) otherwise. */
  readonly gpuLayers: number
  /** Runs one native call atomically, in lane order at the gate; interruption waits for the step. */
  readonly step: <A>(operation: string, run: () => Promise<A>, lane?: Lane) => Effect.Effect<A, EngineFailure>
  /**
   * Runs one native call on a generation sequence as a batchable step: it starts together with
   * the other decode steps waiting right behind it, and they are evaluated in one native batch.
   */
  readonly decodeStep: <A>(operation: string, run: () => Promise<A>, lane: Lane) => Effect.Effect<A, EngineFailure>
  /**
   * Runs a native call sequence that can end early, atomically in lane order like `step`: when the
   * caller is interrupted, `stop.requested` is raised and the interruption waits for `run` to
   * settle, so `run` ends after its native call in flight (it checks the flag between calls).
   */
  readonly stoppableStep: <A>(operation: string, run: (stop: StopRequest) => Promise<A>, lane: Lane) => Effect.Effect<A, EngineFailure>
  /** Whether a step of `lane` or a higher lane waits at the gate now. */
  readonly contended: (lane: Lane) => boolean
  /** The batching option of every context: dispatches the decodes queued in one turn as one native batch. */
  readonly batching: { readonly dispatchSchedule: (dispatch: () => void) => void }
  /** Native batches dispatched so far, and the gate's batches of decode steps and the steps in them. */
  readonly counters: () => { readonly nativeBatches: number; readonly batches: number; readonly batchedSteps: number }
}

export const make = (options: EngineOptions): Effect.Effect<Native, EngineFailure, Scope.Scope> =>
  Effect.gen(function*() {
    const llama = yield* Effect.acquireRelease(
      Effect.tryPromise({
        try: () =>
          getLlama({
            build: "never",
            gpu: options.backend === "cpu" ? false : options.backend,
            ...(options.threads === "auto" ? {} : { maxThreads: options.threads }),
            logLevel: LlamaLogLevel.error,
            progressLogs: false
          }),
        catch: (cause) => new EngineFailure({ operation: "getLlama", reason: reasonOf(cause) })
      }),
      (llama) => Effect.promise(() => llama.dispose())
    )
    // llama.cpp's own count (cpu_get_num_math): physical cores, performance cores on a hybrid CPU.
    const threads = options.threads === "auto" ? Math.max(1, llama.cpuMathCores) : options.threads
    llama.maxThreads = threads
    const decodeThreads = resolveDecodeThreads(options.decodeThreads, threads, Os.availableParallelism())
    // Every context wants `threads`; node-llama-cpp gives each native batch at most the Llama's
    // maxThreads when it dispatches it, so a step sets the count its calls run at (steps never
    // overlap at the gate; the decode steps of one batch all set the same count).
    const batchThreads = decodeThreads === threads ? <A>(run: () => Promise<A>) => run : <A>(run: () => Promise<A>) => () => {
      llama.maxThreads = threads
      return run()
    }
    // A decode step alone is one token: `decodeThreads`. Steps the gate starts together (one
    // synchronous pass) are one native batch of several tokens: `threads`, as llama.cpp gives a
    // batch of more than one token its batch threads.
    let startedThisTurn = 0
    const decodeRun = decodeThreads === threads ? <A>(run: () => Promise<A>) => run : <A>(run: () => Promise<A>) => () => {
      if (startedThisTurn++ === 0) queueMicrotask(() => (startedThisTurn = 0))
      llama.maxThreads = startedThisTurn > 1 ? threads : decodeThreads
      return run()
    }
    const gate = yield* StepGate.make
    const step = <A>(operation: string, run: () => Promise<A>, lane: Lane = "foreground") =>
      gate.run(
        lane,
        Effect.uninterruptible(
          Effect.tryPromise({ try: batchThreads(run), catch: (cause) => new EngineFailure({ operation, reason: reasonOf(cause) }) })
        )
      )
    const stoppableStep = <A>(operation: string, run: (stop: StopRequest) => Promise<A>, lane: Lane) =>
      gate.run(
        lane,
        Effect.async<A, EngineFailure>((resume) => {
          const stop = { requested: false }
          const settled = batchThreads(async () => run(stop))().then(
            (a) => resume(Effect.succeed(a)),
            (cause: unknown) => resume(Effect.fail(new EngineFailure({ operation, reason: reasonOf(cause) })))
          )
          // Interrupted: ask `run` to stop at its next native call boundary, and wait for it.
          return Effect.promise(() => {
            stop.requested = true
            return settled
          })
        })
      )
    const decodeStep = options.batchDecode === false
      ? <A>(operation: string, run: () => Promise<A>, lane: Lane) =>
        gate.run(
          lane,
          Effect.uninterruptible(
            Effect.tryPromise({ try: decodeRun(run), catch: (cause) => new EngineFailure({ operation, reason: reasonOf(cause) }) })
          )
        )
      : <A>(operation: string, run: () => Promise<A>, lane: Lane) =>
        Effect.mapError(gate.batch(lane, decodeRun(run)), (cause) => new EngineFailure({ operation, reason: reasonOf(cause) }))
    let nativeBatches = 0
    const batching = {
      // node-llama-cpp's own "nextCycle" schedule, counted: one call per native batch it dispatches.
      dispatchSchedule: (dispatch: () => void) => {
        nativeBatches += 1
        setImmediate(dispatch)
      }
    }
    const counters = () => {
      const { batches, steps } = gate.batches()
      return { nativeBatches, batches, batchedSteps: steps }
    }
    return { llama, options, threads, decodeThreads, gpuLayers: llama.gpu === false ? 0 : 1_000, step, stoppableStep, decodeStep, contended: gate.contended, batching, counters }
  })
