/**
 * The entry runner's exactly-once check on a turn's stream (RoutingProvider.exactlyOnce), over
 * all inputs: an unbroken stream passes through unchanged and in its batches; a stream that the
 * cluster restarted (a lost runner's turn re-sent to the shard's next owner, starting again from
 * chunk 0) ends with `GenerationFailed` naming the tokens delivered, with no chunk delivered twice;
 * a restart after the Done chunk is not passed on. A turn's stream that ends interrupted, or with
 * the runner connection's socket error alone, is a lost runner's turn; any other end is passed on.
 */
import { SocketGenericError } from "@effect/platform/Socket"
import { assert, describe, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as FiberId from "effect/FiberId"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Stream from "effect/Stream"
import * as fc from "effect/FastCheck"
import { stamp, tokenCount, type TurnChunk } from "../../src/cluster/TurnChunk.js"
import { exactlyOnce, runnerLost } from "../../src/cluster/RoutingProvider.js"
import type { GenerateChunk } from "../../src/domain/Inference.js"
import { done, text } from "./chunks.js"


/** A turn's chunks: texts of 0 to 4 tokens each, then Done. */
const turnChunks = fc.array(fc.array(fc.nat({ max: 50_000 }), { maxLength: 4 }), { maxLength: 12 })
  .map((texts): ReadonlyArray<GenerateChunk> => [...texts.map(text), done])

/** Splits chunks into the batches a stream delivers them in. */
const batched = <A>(items: ReadonlyArray<A>, sizes: ReadonlyArray<number>) => {
  const batches: Array<Chunk.Chunk<A>> = []
  let at = 0
  for (const size of sizes) {
    if (at >= items.length) break
    batches.push(Chunk.unsafeFromArray(items.slice(at, at + size)))
    at += size
  }
  if (at < items.length) batches.push(Chunk.unsafeFromArray(items.slice(at)))
  return Stream.fromChunks(...batches)
}
const batchSizes = fc.array(fc.integer({ min: 1, max: 5 }), { maxLength: 10 })

const stamped = (turn: string, chunks: ReadonlyArray<GenerateChunk>) =>
  Effect.map(Stream.runCollect(Stream.fromIterable(chunks).pipe(stamp(turn))), Chunk.toArray)

describe("exactly-once turns", () => {
  it.effect.prop("an unbroken turn passes through unchanged", [turnChunks, batchSizes], ([chunks, sizes]) =>
    Effect.gen(function*() {
      const turn = yield* stamped("t1", chunks)
      const out = yield* Stream.runCollect(batched(turn, sizes).pipe(exactlyOnce("c", "t1")))
      assert.deepStrictEqual(Chunk.toArray(out), [...chunks])
    }), { fastCheck: { numRuns: 40 } })

  it.effect.prop(
    "a turn restarted by the cluster fails with GenerationFailed after the chunks before the restart, none twice (before any: served whole)",
    [turnChunks, fc.nat(), batchSizes],
    ([chunks, cut, sizes]) =>
      Effect.gen(function*() {
        const turn = yield* stamped("t1", chunks)
        // The first runner delivered `delivered` chunks (not yet Done), then its turn began again on another runner.
        const delivered = cut % chunks.length
        const restarted: ReadonlyArray<TurnChunk> = [...turn.slice(0, delivered), ...turn]
        const seen: Array<GenerateChunk> = []
        const result = yield* batched(restarted, sizes).pipe(
          exactlyOnce("c", "t1"),
          Stream.runForEach((chunk) => Effect.sync(() => seen.push(chunk))),
          Effect.either
        )
        if (delivered === 0) {
          // Lost before its first chunk: the re-sent turn is served once, whole.
          assert.deepStrictEqual(seen, [...chunks])
          assert.isTrue(Either.isRight(result))
          return
        }
        assert.deepStrictEqual(seen, chunks.slice(0, delivered), "only the chunks before the restart, once each")
        assert.isTrue(Either.isLeft(result))
        if (Either.isLeft(result)) {
          assert.strictEqual(result.left._tag, "GenerationFailed")
          const tokens = chunks.slice(0, delivered).reduce((n, c) => n + tokenCount(c), 0)
          assert.strictEqual(result.left.deliveredTokens, tokens)
          assert.include(result.left.reason, "not re-run")
        }
      }),
    { fastCheck: { numRuns: 40 } }
  )

  it.effect.prop("a restart after Done is not passed on: the turn ends whole", [turnChunks, batchSizes], ([chunks, sizes]) =>
    Effect.gen(function*() {
      const turn = yield* stamped("t1", chunks)
      const out = yield* Stream.runCollect(batched([...turn, ...turn], sizes).pipe(exactlyOnce("c", "t1")))
      assert.deepStrictEqual(Chunk.toArray(out), [...chunks])
    }), { fastCheck: { numRuns: 40 } })

  it.effect("a chunk of another turn, or a gap, is refused the same way", () =>
    Effect.gen(function*() {
      const turn = yield* stamped("t1", [text([1, 2]), text([3]), done])
      const other = yield* stamped("t2", [text([1, 2])])
      const foreign = yield* Stream.fromIterable([turn[0]!, { ...other[0]!, index: 1, seq: 2 }]).pipe(
        exactlyOnce("c", "t1"),
        Stream.runCollect,
        Effect.flip
      )
      assert.strictEqual(foreign.deliveredTokens, 2)
      const gap = yield* Stream.fromIterable([turn[0]!, turn[2]!]).pipe(exactlyOnce("c", "t1"), Stream.runCollect, Effect.flip)
      assert.strictEqual(gap._tag, "GenerationFailed")
      assert.strictEqual(gap.deliveredTokens, 2)
    }))
})

describe("a lost runner's turn (RoutingProvider.runnerLost)", () => {
  it("interruption, or the runner connection's socket error alone, is a lost runner; anything else is passed on", () => {
    const socket = new SocketGenericError({ reason: "Write", cause: new Error("EPIPE") })
    const interrupted = Cause.interrupt(FiberId.none)
    assert.isTrue(runnerLost(interrupted))
    assert.isTrue(runnerLost(Cause.die(socket)))
    assert.isTrue(runnerLost(Cause.parallel(Cause.die(socket), interrupted)))
    assert.isFalse(runnerLost(Cause.die(new Error("a bug"))))
    assert.isFalse(runnerLost(Cause.parallel(Cause.die(socket), Cause.die(new Error("a bug")))))
    assert.isFalse(runnerLost(Cause.parallel(Cause.die(socket), Cause.fail("a typed failure"))))
  })
})
