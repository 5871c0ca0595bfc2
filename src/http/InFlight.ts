/**
 * Requests being handled at once, bounded: each request holds a place from before its route runs
 * until its response has been sent (a stream until its last byte) or the client went away; one
 * more than the limit is not run. Places are released however the request ends, interruption
 * included.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { HttpConfig } from "./HttpConfig.js"

export class InFlight extends Context.Tag("nativegen/http/InFlight")<InFlight, {
  readonly limit: number
  /** Requests holding a place now. */
  readonly current: Effect.Effect<number>
  /** `effect` holding one place for its whole run; `whenFull` (holding none) when every place is taken. */
  readonly admit: <A, E, R, B, E2, R2>(effect: Effect.Effect<A, E, R>, whenFull: Effect.Effect<B, E2, R2>) => Effect.Effect<A | B, E | E2, R | R2>
}>() {}

export const make = (limit: number) => {
  let current = 0
  const release = Effect.sync(() => {
    current--
  })
  return InFlight.of({
    limit,
    current: Effect.sync(() => current),
    admit: <A, E, R, B, E2, R2>(effect: Effect.Effect<A, E, R>, whenFull: Effect.Effect<B, E2, R2>) =>
      Effect.uninterruptibleMask((restore) =>
        Effect.suspend((): Effect.Effect<A | B, E | E2, R | R2> => {
          if (current >= limit) return restore(whenFull)
          current++
          return Effect.ensuring(restore(effect), release)
        })
      )
  })
}

/** Bounded by HttpConfig's `maxInFlight`. */
export const layer: Layer.Layer<InFlight, never, HttpConfig> = Layer.effect(
  InFlight,
  Effect.map(HttpConfig, (config) => make(config.maxInFlight))
)
