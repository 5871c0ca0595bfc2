/**
 * A stopping runner lets the streams it serves end before its entities close. @effect/cluster
 * closes an entity by sending its RPC server an end of input and waiting (up to
 * `entityTerminationTimeout`) for its requests to end; but that server (@effect/rpc 0.76) drops
 * every message of an ended client, the stream acks included, and a streamed reply waits for
 * the ack of each chunk: a turn streaming when its entity closes stalls and is cut when the
 * timeout runs out. So the entity layers of a runner close only after the streams in flight on
 * them have ended (`closingAfter`), within `bound`; meanwhile they keep serving, new turns too
 * (the runner still holds its shards), and the runner reports no shards in its load answers, so
 * no one-off is sent to it. A stream still running after the bound is cut as before (the entry
 * turns that into a typed `GenerationFailed`).
 *
 * Conversation turns and one-off generations no longer stream as entity replies (ChunkChannel:
 * their chunks are pushed to the entry, and the entity call answers at the end), so closing an
 * entity waits for them without any ack; the drain still bounds a stop and keeps one-offs away
 * from a stopping runner.
 */
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"

export class Drain extends Context.Tag("nativegen/cluster/Drain")<Drain, {
  /** Whether the runner is stopping (its entities wait for their streams). */
  readonly draining: Effect.Effect<boolean>
  /** `stream`, counted as in flight while it runs. */
  readonly track: <A, E, R>(stream: Stream.Stream<A, E, R>) => Stream.Stream<A, E, R>
  /** Marks the runner stopping and waits until no stream is in flight, or the bound passed. */
  readonly drain: Effect.Effect<void>
}>() {}

export const make = (bound: Duration.DurationInput) =>
  Effect.gen(function*() {
    let inFlight = 0
    let draining = false
    const idle = yield* Effect.makeLatch(true)
    const enter = Effect.sync(() => {
      if (inFlight++ === 0) idle.unsafeClose()
    })
    const leave = Effect.sync(() => {
      if (--inFlight === 0) idle.unsafeOpen()
    })
    return Drain.of({
      draining: Effect.sync(() => draining),
      track: (stream) => Stream.unwrapScoped(Effect.as(Effect.acquireRelease(enter, () => leave), stream)),
      drain: Effect.gen(function*() {
        draining = true
        if (inFlight === 0) return
        const started = Date.now()
        yield* Effect.logInfo(`cluster: stopping; waiting for ${inFlight} streams in flight (at most ${Duration.format(Duration.decode(bound))})`)
        const ended = yield* Effect.timeoutOption(idle.await, bound)
        yield* Option.isSome(ended)
          ? Effect.logInfo(`cluster: the streams in flight ended after ${Date.now() - started} ms`)
          : Effect.logWarning(`cluster: ${inFlight} streams still running after ${Duration.format(Duration.decode(bound))}; they are cut`)
      })
    })
  })

export const layer = (bound: Duration.DurationInput): Layer.Layer<Drain> => Layer.effect(Drain, make(bound))

/** `entities` (entity layers), whose closing first waits for the streams in flight (Drain.drain). */
export const closingAfter = <E, R>(entities: Layer.Layer<never, E, R>): Layer.Layer<never, E, R | Drain> =>
  Layer.scopedDiscard(Effect.gen(function*() {
    yield* Layer.build(entities)
    const drain = yield* Drain
    // Added after the entities' own finalizers, so it runs before them.
    yield* Effect.addFinalizer(() => drain.drain)
  }))
