/**
 * Decisions on the supervised child: teacher-forced label scores per head from the decision
 * model, one at a time (the child has one decision sequence), the prompt prefilled in chunks with
 * the step deadline per chunk. Scoring is idempotent: a score lost with its child is retried once
 * on the replacement.
 */
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import type { HeadScore } from "../../domain/Generation.js"
import type { DecisionHead } from "../../domain/Inference.js"
import { publicError, type WorkerError } from "./ChildErrors.js"
import { ChildFailed, guardedStream, retryOnce, unavailable } from "./ChildFaults.js"
import type { Incarnation } from "./Incarnation.js"
import type { NativeWorkerConfigShape } from "./NativeWorkerConfig.js"
import type { Supervisor } from "./Supervisor.js"

export type Score = (
  prompt: ReadonlyArray<number>,
  heads: ReadonlyArray<DecisionHead>,
  onPrefilled?: (done: number, total: number) => Effect.Effect<void>
) => Effect.Effect<ReadonlyArray<HeadScore>, WorkerError>

export const make = (supervisor: Supervisor, config: NativeWorkerConfigShape): Effect.Effect<Score> =>
  Effect.map(Effect.makeSemaphore(1), (scoring) => (prompt, heads, onPrefilled) => {
    const scoreOn = (incarnation: Incarnation) =>
      guardedStream(
        incarnation.child,
        incarnation.child.client.Score({ prompt, heads, prefillChunk: config.prefillChunk }),
        config.stepDeadline,
        (failure) => Stream.fail(failure)
      ).pipe(
        Stream.runFoldEffect(undefined as ReadonlyArray<HeadScore> | undefined, (result, event) =>
          event._tag === "Scored"
            ? Effect.succeed(event.heads)
            : Effect.as(onPrefilled === undefined ? Effect.void : onPrefilled(event.done, event.total), result)),
        Effect.flatMap((result) =>
          result === undefined
            ? Effect.fail(new ChildFailed({ kind: "protocol", reason: "a score ended without its result" }))
            : Effect.succeed(result)
        )
      )
    return scoring.withPermits(1)(Effect.mapError(unavailable(retryOnce(supervisor.onReady(scoreOn, undefined))), publicError))
  })
