/**
 * The owner's coalescing of a remote turn's chunks (Coalesce.coalesce), on TestClock: the first
 * element goes at once (no clock advance), later ones wait for the hold or go with the end of the
 * stream, never after it; a failure comes after every element before it. Over all inputs
 * (fast-check: engine batches and the times between them): the elements come out in order, none
 * lost or repeated, and a stamped turn passed through it still passes the entry's exactly-once
 * check unchanged (token sequence numbers intact).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as fc from "effect/FastCheck"
import * as Fiber from "effect/Fiber"
import * as Mailbox from "effect/Mailbox"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Stream from "effect/Stream"
import * as TestClock from "effect/TestClock"
import { coalesce } from "../../src/cluster/Coalesce.js"
import { stamp, type TurnChunk } from "../../src/cluster/TurnChunk.js"
import { exactlyOnce } from "../../src/cluster/RoutedTurn.js"
import type { GenerateChunk } from "../../src/domain/Inference.js"
import { done, text } from "./chunks.js"

/** Runs `stream` in the background; each chunk it emits goes to the returned queue, then its exit. */
const drive = <A, E>(stream: Stream.Stream<A, E>) =>
  Effect.gen(function*() {
    const out = yield* Queue.unbounded<ReadonlyArray<A>>()
    const fiber = yield* Stream.runForEachChunk(stream, (chunk) => Queue.offer(out, Chunk.toArray(chunk))).pipe(Effect.fork)
    return { out, fiber }
  })

/** Lets every fiber that can run, run (no clock change). */
const settle = Effect.repeatN(Effect.yieldNow(), 20)

describe("coalescing a turn's chunks", () => {
  it.effect("the first element goes at once; later ones are held, and the end is not", () =>
    Effect.gen(function*() {
      const source = yield* Mailbox.make<number>()
      const { fiber, out } = yield* drive(Mailbox.toStream(source).pipe(coalesce({ hold: "5 millis" })))
      yield* source.offer(1)
      // No clock advance: the first element is not held.
      assert.deepStrictEqual(yield* Queue.take(out), [1])
      yield* source.offerAll([2, 3])
      yield* settle
      yield* TestClock.adjust("4 millis")
      yield* settle
      assert.isTrue(Option.isNone(yield* Queue.poll(out)), "held for less than the hold")
      yield* source.offer(4)
      yield* TestClock.adjust("1 millis")
      assert.deepStrictEqual(yield* Queue.take(out), [2, 3, 4])
      // The last elements go with the end of the stream, not after the hold.
      yield* source.offer(5)
      yield* settle
      yield* source.offer(6)
      yield* source.end
      assert.deepStrictEqual(yield* Queue.take(out), [5, 6])
      assert.isTrue(Exit.isSuccess(yield* Fiber.await(fiber)))
    }), 10_000)

  it.effect("a failure comes after the elements before it", () =>
    Effect.gen(function*() {
      const source = yield* Mailbox.make<number, string>()
      const { fiber, out } = yield* drive(Mailbox.toStream(source).pipe(coalesce({ hold: "5 millis" })))
      yield* source.offer(1)
      assert.deepStrictEqual(yield* Queue.take(out), [1])
      yield* source.offerAll([2, 3])
      yield* settle
      yield* source.fail("engine lost")
      assert.deepStrictEqual(yield* Queue.take(out), [2, 3])
      const exit = yield* Fiber.await(fiber)
      assert.deepStrictEqual(exit, Exit.fail("engine lost"))
    }), 10_000)

  it.effect("with no hold, what is ready goes at once, together", () =>
    Effect.gen(function*() {
      const source = yield* Mailbox.make<number>()
      yield* source.offerAll([1, 2, 3])
      const { fiber, out } = yield* drive(Mailbox.toStream(source).pipe(coalesce()))
      assert.deepStrictEqual(yield* Queue.take(out), [1, 2, 3])
      yield* source.offer(4)
      assert.deepStrictEqual(yield* Queue.take(out), [4])
      yield* source.end
      assert.isTrue(Exit.isSuccess(yield* Fiber.await(fiber)))
    }), 10_000)

  /** Engine batches of a turn (texts of 0 to 4 tokens, then Done), each with the ms before it comes. */
  const engine = fc.array(fc.tuple(fc.array(fc.nat({ max: 50_000 }), { maxLength: 4 }), fc.integer({ min: 0, max: 12 })), {
    minLength: 1,
    maxLength: 14
  })

  it.effect.prop(
    "a stamped turn keeps its order and sequence numbers through it, and its first chunk is not held",
    [engine, fc.integer({ min: 0, max: 8 })],
    ([batches, hold]) =>
      Effect.gen(function*() {
        const chunks: ReadonlyArray<GenerateChunk> = [...batches.map(([tokens]) => text(tokens)), done]
        const source = yield* Mailbox.make<TurnChunk>()
        const turn = Mailbox.toStream(source).pipe(coalesce({ hold: `${hold} millis` }))
        const { fiber, out } = yield* drive(turn)
        const stamped = Chunk.toArray(yield* Stream.runCollect(Stream.fromIterable(chunks).pipe(stamp("t1"))))
        const received: Array<TurnChunk> = []
        for (let i = 0; i < stamped.length; i++) {
          if (i > 0) yield* TestClock.adjust(`${batches[i - 1]?.[1] ?? 0} millis`)
          yield* source.offer(stamped[i]!)
          yield* settle
          if (i === 0) {
            const first = yield* Queue.take(out)
            assert.deepStrictEqual(first[0], stamped[0], "the first chunk went before any clock advance")
            received.push(...first)
          }
        }
        yield* source.end
        assert.isTrue(Exit.isSuccess(yield* Fiber.await(fiber)))
        received.push(...(yield* Queue.takeAll(out)).pipe(Chunk.toArray).flat())
        assert.deepStrictEqual(received, stamped)
        const passed = yield* Stream.runCollect(Stream.fromIterable(received).pipe(exactlyOnce("t1")))
        assert.deepStrictEqual(Chunk.toArray(passed), [...chunks])
      }),
    { fastCheck: { numRuns: 60 }, timeout: 30_000 }
  )
})
