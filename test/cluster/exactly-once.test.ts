/**
 * The entry runner's exactly-once check on a turn's stream (RoutedTurn.exactlyOnce), over
 * all inputs: an unbroken stream passes through unchanged and in its batches; a stream that the
 * cluster restarted (a lost runner's turn re-sent to the shard's next owner, starting again from
 * chunk 0) ends with `TurnRestarted` naming the tokens delivered (the entry then resumes it or
 * fails it), with no chunk delivered twice; a restart after the Done chunk is not passed on. A
 * resumed turn (TurnChunk.stampResumed: run again, the delivered chunks checked and dropped) gives
 * exactly the rest of the turn; a re-run that differs from what was delivered fails, sending nothing. A turn's stream that ends interrupted, or with
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
import { stamp, stampResumed, tokenCount, type TurnChunk } from "../../src/cluster/TurnChunk.js"
import { exactlyOnce, runnerLost } from "../../src/cluster/RoutedTurn.js"
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
      const out = yield* Stream.runCollect(batched(turn, sizes).pipe(exactlyOnce("t1")))
      assert.deepStrictEqual(Chunk.toArray(out), [...chunks])
    }), { fastCheck: { numRuns: 40 } })

  it.effect.prop(
    "a turn restarted by the cluster fails with TurnRestarted after the chunks before the restart, none twice (before any: served whole)",
    [turnChunks, fc.nat(), batchSizes],
    ([chunks, cut, sizes]) =>
      Effect.gen(function*() {
        const turn = yield* stamped("t1", chunks)
        // The first runner delivered `delivered` chunks (not yet Done), then its turn began again on another runner.
        const delivered = cut % chunks.length
        const restarted: ReadonlyArray<TurnChunk> = [...turn.slice(0, delivered), ...turn]
        const seen: Array<GenerateChunk> = []
        const result = yield* batched(restarted, sizes).pipe(
          exactlyOnce("t1"),
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
          assert.strictEqual(result.left._tag, "TurnRestarted")
          const tokens = chunks.slice(0, delivered).reduce((n, c) => n + tokenCount(c), 0)
          assert.strictEqual(result.left.deliveredTokens, tokens)
          assert.include(result.left.detail, `came after chunk ${delivered - 1}`)
        }
      }),
    { fastCheck: { numRuns: 40 } }
  )

  it.effect.prop("a restart after Done is not passed on: the turn ends whole", [turnChunks, batchSizes], ([chunks, sizes]) =>
    Effect.gen(function*() {
      const turn = yield* stamped("t1", chunks)
      const out = yield* Stream.runCollect(batched([...turn, ...turn], sizes).pipe(exactlyOnce("t1")))
      assert.deepStrictEqual(Chunk.toArray(out), [...chunks])
    }), { fastCheck: { numRuns: 40 } })

  it.effect("a chunk of another turn, or a gap, is refused the same way", () =>
    Effect.gen(function*() {
      const turn = yield* stamped("t1", [text([1, 2]), text([3]), done])
      const other = yield* stamped("t2", [text([1, 2])])
      const foreign = yield* Stream.fromIterable([turn[0]!, { ...other[0]!, index: 1, seq: 2 }]).pipe(
        exactlyOnce("t1"),
        Stream.runCollect,
        Effect.flip
      )
      assert.strictEqual(foreign.deliveredTokens, 2)
      const gap = yield* Stream.fromIterable([turn[0]!, turn[2]!]).pipe(exactlyOnce("t1"), Stream.runCollect, Effect.flip)
      assert.strictEqual(gap._tag, "TurnRestarted")
      assert.strictEqual(gap.deliveredTokens, 2)
    }))
})

describe("resumed turns (TurnChunk.stampResumed)", () => {
  /** What an entry delivered of `chunks` before their runner was lost: the first `count` chunks and their tokens. */
  const deliveredOf = (chunks: ReadonlyArray<GenerateChunk>, count: number) => ({
    chunks: count,
    tokens: chunks.slice(0, count).flatMap((c) => (c._tag === "Done" ? [] : c.tokens))
  })

  it.effect.prop(
    "a re-run that repeats the turn gives exactly the chunks after the delivered ones, numbered on",
    [turnChunks, fc.nat(), batchSizes],
    ([chunks, cut, sizes]) =>
      Effect.gen(function*() {
        const resume = deliveredOf(chunks, cut % chunks.length)
        const rerun = Chunk.toArray(yield* Stream.runCollect(batched([...chunks], sizes).pipe(stampResumed("t2", resume))))
        assert.deepStrictEqual(rerun.map((c) => c.chunk), chunks.slice(resume.chunks))
        const rest = yield* Stream.runCollect(Stream.fromIterable(rerun).pipe(exactlyOnce("t2", { index: resume.chunks, seq: resume.tokens.length })))
        assert.deepStrictEqual([...chunks.slice(0, resume.chunks), ...Chunk.toArray(rest)], [...chunks], "delivered + resumed = the turn, once")
      }),
    { fastCheck: { numRuns: 60 } }
  )

  it.effect.prop(
    "a re-run that differs (a token, a chunk boundary, an early end) fails naming the delivered tokens, and sends nothing",
    [turnChunks.filter((c) => c.length > 2 && c.some((x) => x._tag !== "Done" && x.tokens.length > 0)), fc.nat(), fc.nat(), fc.constantFrom("token", "boundary", "end")],
    ([chunks, cut, after, change]) =>
      Effect.gen(function*() {
        const withTokens = chunks.flatMap((c, i) => (c._tag !== "Done" && c.tokens.length > 0 ? [i] : []))
        const changed = withTokens[cut % withTokens.length]!
        // The change is in the delivered part: its last chunk or any before it. (A boundary moved
        // inside it is caught by the tokens after it, or by the count at its end.)
        const resume = deliveredOf(chunks, changed + 1 + (after % (chunks.length - 1 - changed)))
        const rerun: Array<GenerateChunk> = chunks.map((c, i) => {
          if (i !== changed || c._tag === "Done") return c
          if (change === "token") return text([c.tokens[0]! + 1, ...c.tokens.slice(1)])
          return change === "boundary" ? text(c.tokens.slice(1)) : done
        })
        const sent: Array<TurnChunk> = []
        const failure = yield* Stream.fromIterable(rerun).pipe(
          stampResumed("t2", resume),
          Stream.runForEach((c) => Effect.sync(() => sent.push(c))),
          Effect.flip
        )
        assert.strictEqual(failure._tag, "GenerationFailed")
        assert.strictEqual(failure.deliveredTokens, resume.tokens.length)
        assert.deepStrictEqual(sent, [])
      }),
    { fastCheck: { numRuns: 60 } }
  )
})

describe("a lost runner's turn (RoutedTurn.runnerLost)", () => {
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
