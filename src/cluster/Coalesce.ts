/**
 * Fewer, larger messages for a remote stream held by `--cluster-hold` (ChunkChannel.pushTo applies
 * it only then): the owner of a turn pushes its chunks to the entry as @effect/rpc messages, one
 * message per stream chunk, and each message costs a socket write and a wake-up in both runners
 * and its answer before the next may leave. `coalesce` re-chunks a stream so that a message carries
 * every element that is ready: the first element goes at once (a turn's first token is never
 * held); after it, each batch takes what the producer made while the previous one was in flight
 * and, with a `hold`, waits that long for more (the engine's next step) before it goes. The end
 * of the stream (its last elements, or its failure) is never held: a hold ends when the producer
 * does. Elements keep their order, none is dropped or repeated: only their grouping changes.
 *
 * Memory: the producer runs ahead of the consumer by at most `capacity` elements (a bounded
 * mailbox; the producer waits when it is full).
 */
import * as Chunk from "effect/Chunk"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Mailbox from "effect/Mailbox"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"

export interface CoalesceOptions {
  /** How long a batch after the first waits for more elements before it goes (default 0: only what is ready). */
  readonly hold?: Duration.DurationInput | undefined
  /** Elements the producer may run ahead of the consumer (default 256). */
  readonly capacity?: number | undefined
}

export const coalesce = (options: CoalesceOptions = {}) =>
<A, E, R>(stream: Stream.Stream<A, E, R>): Stream.Stream<A, E, R> =>
  Stream.unwrapScoped(Effect.gen(function*() {
    const hold = Duration.decode(options.hold ?? 0)
    const mailbox = yield* Mailbox.make<A, E>(options.capacity ?? 256)
    const ended = yield* Deferred.make<void>()
    yield* stream.pipe(
      Stream.runForEachChunk((chunk) => mailbox.offerAll(chunk)),
      Mailbox.into(mailbox),
      Effect.ensuring(Deferred.succeed(ended, undefined)),
      Effect.forkScoped
    )
    let first = true
    let finished = false
    const next: Effect.Effect<Chunk.Chunk<A>, Option.Option<E>> = Effect.suspend(() => {
      if (finished) return Effect.fail(Option.none())
      return Effect.flatMap(Effect.mapError(mailbox.takeAll, Option.some), ([ready, done]) => {
        if (done) {
          finished = true
          return Chunk.isEmpty(ready) ? Effect.fail(Option.none()) : Effect.succeed(ready)
        }
        if (first || Duration.isZero(hold)) {
          first = false
          return Effect.succeed(ready)
        }
        // Held until `hold` passed or the producer ended; then whatever came meanwhile goes too (a
        // failure of the stream is raised on the next pull, after these).
        return Effect.raceFirst(Effect.sleep(hold), Deferred.await(ended)).pipe(
          Effect.zipRight(mailbox.clear),
          Effect.map((more) => Chunk.appendAll(ready, more)),
          Effect.catchAllCause(() => Effect.succeed(ready))
        )
      })
    })
    return Stream.repeatEffectChunkOption(next)
  }))
