/**
 * A Begin never waits for the engine: it reckons what the sequence keeps and answers, and the
 * generation's first step trims the sequence. So a request submitted while another generation
 * holds the engine waits at the step gate once (for its first step), not twice. Shown with a
 * generation that stops making progress while holding the engine (the `hangAtStep` failpoint):
 * a second generation's Begin is still answered (the hang is found at the step deadline and the
 * child replaced, which only the first child does).
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import { failpointsEnv } from "../../src/native/Failpoints.js"
import { NativeWorker } from "../../src/services/NativeWorker.js"
import { awaitReadiness, workerLayer } from "../support/engine.js"

/** Decode steps in the child's life before the one that hangs (the warm-up decodes at most one). */
const HANG_AT = 12

describe("Begin and the step gate", () => {
  layer(workerLayer({ childEnv: failpointsEnv(`hangAtStep=${HANG_AT}@1`), stepDeadline: Duration.seconds(4) }), {
    timeout: 120_000,
    excludeTestServices: true
  })("a generation holding the engine", (it) => {
    it.effect("a second generation's Begin is answered while the first holds the engine", () =>
      Effect.gen(function*() {
        const worker = yield* NativeWorker
        const holding = yield* Deferred.make<void>()
        let received = 0
        // The first generation decodes until the failpoint stops it inside a step (the engine stays held).
        const first = yield* worker.generate({ prompt: [1, 2, 3], maxTokens: 100, sampling: { temperature: 0 }, sequence: 0 }).pipe(
          Stream.runForEach((event) =>
            event._tag === "Token" && ++received >= HANG_AT - 2 ? Deferred.succeed(holding, undefined) : Effect.void
          ),
          Effect.fork
        )
        yield* Deferred.await(holding)
        // Its Started event comes from Begin's answer: it arrives although no step can run.
        const started = yield* worker.generate({ prompt: [4, 5, 6, 7], maxTokens: 1, sampling: { temperature: 0 }, sequence: 1 }).pipe(
          Stream.runHead
        )
        assert.deepStrictEqual(Option.map(started, (e) => e._tag), Option.some("Started"))
        // Answered by the first child itself, not by a replacement after the hang was found.
        assert.strictEqual((yield* worker.readiness).incarnation, 1)
        // The hang is then found (no progress within the step deadline) and the child replaced.
        const exit = yield* Fiber.await(first)
        assert.strictEqual(exit._tag, "Failure")
        yield* awaitReadiness((r) => r.state === "ready" && r.incarnation === 2)
      }))
  })
})
