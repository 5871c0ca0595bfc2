/**
 * A generation on the supervised child, as a stream: Begin and the first Advance in one request on
 * the ready child (the guarded stream), End when the caller lets go. A child failure before the first token reached the
 * caller runs the generation again on the replacement (once); after that it fails with
 * GenerationFailed saying how many tokens were delivered, so no token is ever delivered twice.
 */
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import * as Crypto from "node:crypto"
import { type EngineError, type EngineUnavailable, GenerationFailed } from "../../domain/EngineError.js"
import type { GenerationEvent, TokenGenerateRequest } from "../../domain/Generation.js"
import { publicError, type WorkerError } from "./ChildErrors.js"
import { guarded, guardedStream, retryOnce, unavailable } from "./ChildFaults.js"
import type { Incarnation } from "./Incarnation.js"
import type { NativeWorkerConfigShape } from "./NativeWorkerConfig.js"
import type { Supervisor } from "./Supervisor.js"

export type GenerationError = EngineError | EngineUnavailable | GenerationFailed

/** Streams a generation on the supervisor's ready child. */
export const make = (supervisor: Supervisor, config: NativeWorkerConfigShape) => {
  /** One attempt; `mayRetry`: a failure before the first token starts it again (once). */
  const generation = (request: TokenGenerateRequest, mayRetry: boolean): Stream.Stream<GenerationEvent, GenerationError> =>
    Stream.unwrapScoped(
      Effect.gen(function*() {
        const generationId = Crypto.randomUUID()
        // End is registered before Begin is sent: a caller interrupted while Begin is in flight
        // still ends it (the child remembers an End that overtakes its Begin). A child that was
        // replaced meanwhile took the generation with it.
        let begunOn: Incarnation | undefined
        yield* Effect.addFinalizer(() =>
          Effect.suspend(() => {
            const incarnation = begunOn
            if (incarnation === undefined) return Effect.void
            return Effect.flatMap(supervisor.isCurrent(incarnation), (current) =>
              // Sent, not awaited: the child forgets the generation when it reads the End, before
              // anything sent after it (a Begin on the same sequence waits there for its close).
              current
                ? Effect.ignore(guarded(incarnation.child, incarnation.child.client.End({ generationId }, { discard: true }), config.stepDeadline))
                : Effect.void)
          })
        )
        // Begin travels with the first Advance (one round trip to set up and start); Started, with
        // the reused prompt tokens, comes in the first step's message. A Begin that fails fails it.
        const incarnation = yield* unavailable(retryOnce(supervisor.onReady((incarnation) =>
          Effect.sync(() => {
            begunOn = incarnation
            return incarnation
          })
        )))
        let delivered = 0
        const steps = guardedStream(
          incarnation.child,
          incarnation.child.client.Advance({
            generationId,
            fromIndex: 0,
            begin: { ...request, generationId, prefillChunk: config.prefillChunk }
          }),
          config.stepDeadline,
          (failure): Stream.Stream<GenerationEvent, GenerationError> => {
            const repair = supervisor.onFailure(incarnation, failure)
            // Nothing reached the caller yet: start again on the replacement (which waits for it).
            if (mayRetry && delivered === 0) return Stream.unwrap(Effect.as(repair, generation(request, false)))
            return Stream.fromEffect(
              Effect.zipRight(repair, Effect.fail(new GenerationFailed({ deliveredTokens: delivered, reason: failure.reason })))
            )
          }
        ).pipe(
          // Counted per message from the child (a chunk of steps), keeping its chunk whole.
          Stream.mapChunks((events) => {
            for (const e of events) if (e._tag === "Token") delivered++
            return events
          })
        )
        return steps
      })
    )

  // Mapped once, when the stream fails: nothing more per event.
  return (request: TokenGenerateRequest): Stream.Stream<GenerationEvent, WorkerError | GenerationFailed> =>
    Stream.mapError(generation(request, true), (e) => (e._tag === "GenerationFailed" ? e : publicError(e)))
}
