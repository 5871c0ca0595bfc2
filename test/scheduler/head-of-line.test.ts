/**
 * Head-of-line waiting: a short request without a conversation, sent while a long one holds the
 * anonymous sequence, starts at once on a conversation slot that no conversation owns and
 * completes while the long one is still decoding; a conversation's slot is never borrowed. A real
 * engine child (tiny), the default scheduler configuration (two conversation slots, one anonymous).
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import type { GenerateRequest } from "../../src/domain/Inference.js"
import { Provider } from "../../src/services/Provider.js"
import { Scheduler } from "../../src/services/Scheduler.js"
import { runtimeLayer } from "../support/engine.js"

const ask = (content: string, maxTokens: number, extra: Partial<GenerateRequest> = {}): GenerateRequest => ({
  messages: [{ role: "user", content }],
  maxTokens,
  sampling: { temperature: 0 },
  ...extra
})

const LONG = 400

/** Starts a long generation and waits until it has streamed some tokens; `received` counts them. */
const startLong = (provider: Provider["Type"], request: GenerateRequest) =>
  Effect.gen(function*() {
    let received = 0
    const streaming = yield* Deferred.make<void>()
    const fiber = yield* provider.generate(request).pipe(
      Stream.tap((chunk) =>
        Effect.suspend(() => {
          if (chunk._tag === "Text") received += chunk.tokens.length
          return received >= 8 ? Deferred.succeed(streaming, undefined) : Effect.void
        })
      ),
      Stream.runDrain,
      Effect.fork
    )
    yield* Deferred.await(streaming)
    return { fiber, received: () => received }
  })

describe("head-of-line waiting", () => {
  layer(runtimeLayer(), { timeout: 180_000, excludeTestServices: true })("default slots", (it) => {
    it.effect("a short request behind a long one completes while the long one is still decoding", () =>
      Effect.gen(function*() {
        const provider = yield* Provider
        const scheduler = yield* Scheduler
        const long = yield* startLong(provider, ask("tell me a long story about the sea", LONG))
        const short = yield* Stream.runCollect(provider.generate(ask("hi", 4)))
        const receivedThen = long.received()
        assert.isTrue(Chunk.some(short, (c) => c._tag === "Text"), "the short request produced no text")
        assert.isBelow(receivedThen, LONG, "the long generation had finished first")
        assert.isTrue(Option.isNone(yield* Fiber.poll(long.fiber)), "the long generation had finished first")
        const status = yield* scheduler.status
        assert.strictEqual(status.running, 1)
        yield* Fiber.join(long.fiber)
      }))

    it.effect("a conversation's slot is never borrowed: with both owned, the short request waits for the anonymous one", () =>
      Effect.gen(function*() {
        const provider = yield* Provider
        const scheduler = yield* Scheduler
        // Both conversation slots owned (idle), the anonymous sequence busy with a long generation.
        yield* Stream.runDrain(provider.generate(ask("first", 2, { conversation: "a" })))
        yield* Stream.runDrain(provider.generate(ask("second", 2, { conversation: "b" })))
        const long = yield* startLong(provider, ask("tell me a long story about the sea", 40))
        const short = yield* Effect.fork(Stream.runCollect(provider.generate(ask("hi", 4))))
        yield* Fiber.join(long.fiber)
        yield* Fiber.join(short)
        assert.strictEqual(scheduler.slotOf("a"), 0)
        assert.strictEqual(scheduler.slotOf("b"), 1)
        assert.strictEqual((yield* scheduler.status).conversations, 2)
      }))
  })
})
