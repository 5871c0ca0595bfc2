/**
 * Side effects on a stream that keep its chunks whole. `Stream.tap` runs its effect per element
 * and writes each element as a chunk of its own: a stream of tokens that the engine child sent
 * together (one message, one chunk) leaves it one token per chunk, and every stage after it (a
 * push to another runner, an RPC reply) then pays per token. These run once per chunk.
 */
import type * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"

/** Runs `f` on each chunk as it passes; the chunk goes on whole once `f` has run. */
export const tapChunks = <A, X, E2, R2>(f: (chunk: Chunk.Chunk<A>) => Effect.Effect<X, E2, R2>) =>
<E, R>(self: Stream.Stream<A, E, R>): Stream.Stream<A, E | E2, R | R2> =>
  Stream.mapChunksEffect(self, (chunk) => Effect.as(f(chunk), chunk))

/** Runs `f` on each chunk as it passes, synchronously; the chunk goes on whole. */
export const observeChunks = <A>(f: (chunk: Chunk.Chunk<A>) => void) =>
<E, R>(self: Stream.Stream<A, E, R>): Stream.Stream<A, E, R> =>
  Stream.mapChunks(self, (chunk) => {
    f(chunk)
    return chunk
  })
