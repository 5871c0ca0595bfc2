/**
 * Side effects that keep a stream's chunks whole (internal/ChunkTap.ts), over all inputs: the
 * chunks come out as they went in (the same elements, the same grouping), the effect runs once per
 * chunk and sees each chunk before it is passed on, and a failing effect stops the stream there
 * with the chunks before it delivered. What it replaces, Stream.tap, splits every chunk into
 * single elements: the first property fails with it.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as fc from "effect/FastCheck"
import * as Stream from "effect/Stream"
import { observeChunks, tapChunks } from "../../src/internal/ChunkTap.js"

const batches = fc.array(fc.array(fc.integer(), { minLength: 1, maxLength: 6 }), { maxLength: 10 })

/** A stream that emits exactly these chunks. */
const chunked = (items: ReadonlyArray<ReadonlyArray<number>>) => Stream.fromChunks(...items.map((b) => Chunk.unsafeFromArray([...b])))

const groupingOf = <A, E>(stream: Stream.Stream<A, E>) =>
  Effect.map(Stream.runCollect(Stream.chunks(stream)), (chunks) => Chunk.toReadonlyArray(chunks).map((c) => Chunk.toReadonlyArray(c)))

describe("ChunkTap", () => {
  it.effect.prop("tapChunks keeps the grouping and runs its effect once per chunk, before passing it on", [batches], ([items]) =>
    Effect.gen(function*() {
      const seen: Array<ReadonlyArray<number>> = []
      const delivered: Array<number> = []
      const out = yield* groupingOf(
        chunked(items).pipe(
          tapChunks((chunk) => Effect.sync(() => seen.push(Chunk.toReadonlyArray(chunk)))),
          observeChunks((chunk) => {
            // Each chunk reaches the next stage only after the effect saw it.
            assert.strictEqual(seen.length, delivered.length + 1)
            delivered.push(chunk.length)
          })
        )
      )
      assert.deepStrictEqual(out, items)
      assert.deepStrictEqual(seen, items)
    }))

  it.effect.prop("a failing effect ends the stream at its chunk: the chunks before it delivered, none after", [batches, fc.nat()], ([items, at]) =>
    Effect.gen(function*() {
      if (items.length === 0) return
      const failAt = at % items.length
      let calls = 0
      const delivered: Array<ReadonlyArray<number>> = []
      const result = yield* chunked(items).pipe(
        tapChunks(() => (calls++ === failAt ? Effect.fail("stopped" as const) : Effect.void)),
        Stream.runForEachChunk((chunk) => Effect.sync(() => delivered.push(Chunk.toReadonlyArray(chunk)))),
        Effect.either
      )
      assert.deepStrictEqual(result, Either.left("stopped"))
      assert.deepStrictEqual(delivered, items.slice(0, failAt))
      assert.strictEqual(calls, failAt + 1)
    }))
})
