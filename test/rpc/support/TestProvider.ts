/**
 * A Provider for testing the RPC layer (not the engine): each `generate` is announced on a queue
 * with a handle the test drives (offer chunks, fail, end) and that records how the stream ended
 * (interrupted or not); `decide` answers at once or, for the prompt "fail", fails with a typed
 * error; readiness comes from a SubscriptionRef the test can change.
 */
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Queue from "effect/Queue"
import * as RuntimeFlags from "effect/RuntimeFlags"
import * as Stream from "effect/Stream"
import * as SubscriptionRef from "effect/SubscriptionRef"
import type { GenerateChunk, GenerateRequest, Readiness } from "../../../src/domain/Inference.js"
import { Provider } from "../../../src/services/Provider.js"
import { InvalidRequest, type ProviderError } from "../../../src/services/ProviderError.js"

export type Step =
  | { readonly _tag: "Chunk"; readonly chunk: GenerateChunk }
  | { readonly _tag: "Fail"; readonly error: ProviderError }
  | { readonly _tag: "End" }

/** One generation in progress, as the test sees it. */
export interface Generation {
  readonly request: GenerateRequest
  readonly offer: (step: Step) => Effect.Effect<void>
  /** Completes with the stream's exit when the server stops consuming it. */
  readonly ended: Deferred.Deferred<Exit.Exit<unknown, unknown>>
}

export interface TestProviderControl {
  /** Each generation, when it starts. */
  readonly generations: Queue.Queue<Generation>
  /** Whether Effect's fiber metrics were on in the last `decide` (the fiber the server ran it in). */
  readonly lastDecide: { fiberMetrics: boolean | undefined }
  readonly readiness: SubscriptionRef.SubscriptionRef<Readiness>
}

export const readiness = (state: Readiness["state"]): Readiness => ({
  state,
  reason: state === "ready" ? null : `test ${state}`,
  engine: { incarnation: 1, pid: 42, backend: "cpu", nodeLlamaCppVersion: "test", uptimeMillis: 1 },
  budget: null,
  roles: [],
  scheduler: { running: 0, queued: 0, slots: 2, conversations: 0 },
  recoveryActions: []
})

export const text = (value: string, tokens: ReadonlyArray<number> = [1]): Step => ({
  _tag: "Chunk",
  chunk: { _tag: "Text", channel: "answer", text: value, tokens }
})

export const done: Step = {
  _tag: "Chunk",
  chunk: {
    _tag: "Done",
    stopReason: "endOfGeneration",
    usage: { promptTokens: 3, reusedTokens: 0, generatedTokens: 2, reuse: "cold" },
    timings: { queueMillis: 0, firstTokenMillis: 1, decodeTokensPerSecond: 100, totalMillis: 2 }
  }
}

export const make = Effect.gen(function*() {
  const generations = yield* Queue.unbounded<Generation>()
  const readinessRef = yield* SubscriptionRef.make(readiness("ready"))

  const generate = (request: GenerateRequest): Stream.Stream<GenerateChunk, ProviderError> =>
    Stream.unwrapScoped(Effect.gen(function*() {
      const steps = yield* Queue.unbounded<Step>()
      const ended = yield* Deferred.make<Exit.Exit<unknown, unknown>>()
      yield* Effect.addFinalizer((exit) => Deferred.succeed(ended, exit))
      yield* Queue.offer(generations, { request, offer: (step) => Queue.offer(steps, step), ended })
      return Stream.fromQueue(steps).pipe(
        Stream.takeWhile((step) => step._tag !== "End"),
        Stream.mapEffect((step): Effect.Effect<GenerateChunk, ProviderError> =>
          step._tag === "Chunk" ? Effect.succeed(step.chunk) : Effect.fail((step as Extract<Step, { _tag: "Fail" }>).error)
        )
      )
    }))

  const control: TestProviderControl = { generations, readiness: readinessRef, lastDecide: { fiberMetrics: undefined } }
  const provider = Provider.of({
    generate,
    decide: (request) =>
      Effect.tap(Effect.getRuntimeFlags, (flags) => {
        control.lastDecide.fiberMetrics = RuntimeFlags.runtimeMetrics(flags)
      }).pipe(Effect.zipRight(
        request.prompt === "fail"
        ? Effect.fail(new InvalidRequest({ field: "prompt", value: "fail", reason: "the test says so" }))
        : Effect.succeed({
          heads: request.heads.map((head) => ({
            name: head.name,
            labels: head.labels.map((label, i) => ({ label, probability: i === 0 ? 1 : 0, rank: i + 1, logLikelihood: -i }))
          })),
          promptTokens: typeof request.prompt === "string" ? request.prompt.length : request.prompt.length,
          queueMillis: 0,
          totalMillis: 1
        })
      )),
    count: (request) =>
      Effect.succeed({ role: request.role ?? "generation", tokens: (request.text ?? "").length, admittedContext: 4096 }),
    tokenize: (request) =>
      Effect.succeed({
        role: request.role ?? "generation",
        tokens: Array.from(request.text ?? "", (char) => char.codePointAt(0) ?? 0),
        admittedContext: 4096
      }),
    prepare: (request) =>
      Effect.succeed({ conversation: request.conversation, preparedTokens: 5, totalTokens: 5, complete: true }),
    readiness: SubscriptionRef.get(readinessRef),
    readinessChanges: readinessRef.changes
  })
  return { control, provider }
})

export class TestControl extends Context.Tag("test/rpc/TestControl")<TestControl, TestProviderControl>() {}

/** The test Provider and its control. */
export const layer: Layer.Layer<Provider | TestControl> = Layer.effectContext(Effect.map(make, ({ control, provider }) =>
  Context.make(Provider, provider).pipe(Context.add(TestControl, control))))
