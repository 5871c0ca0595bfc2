/**
 * The engine's step gate: one step at a time, and at every step boundary the next step goes to
 * the highest lane waiting (decision, foreground, utility, preparation), first come first served
 * within a lane. A generation re-queues for each step, so generations of one lane interleave step
 * by step and a decision submitted mid-generation runs at the next boundary. An interrupted waiter
 * leaves the queue; a step holding the gate is released exactly once.
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"

import type { Lane } from "./Protocol.js"

export const lanes: ReadonlyArray<Lane> = ["decision", "foreground", "utility", "preparation"]

export interface StepGate {
  /** Runs `step` when the gate is free and no higher-priority or earlier same-lane waiter remains. */
  readonly run: <A, E, R>(lane: Lane, step: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
}

export const make: Effect.Effect<StepGate> = Effect.sync(() => {
  const queues: Record<Lane, Array<Deferred.Deferred<void>>> = {
    decision: [],
    foreground: [],
    utility: [],
    preparation: []
  }
  let busy = false

  /** Hands the gate to the next waiter, if any; otherwise frees it. */
  const handOff = () => {
    for (const lane of lanes) {
      const next = queues[lane].shift()
      if (next !== undefined) {
        Deferred.unsafeDone(next, Effect.void)
        return
      }
    }
    busy = false
  }

  const acquire = (lane: Lane) =>
    Effect.suspend(() => {
      if (!busy) {
        busy = true
        return Effect.void
      }
      return Effect.flatMap(Deferred.make<void>(), (turn) => {
        queues[lane].push(turn)
        return Deferred.await(turn).pipe(
          Effect.onInterrupt(() =>
            Effect.sync(() => {
              const i = queues[lane].indexOf(turn)
              if (i >= 0) queues[lane].splice(i, 1)
              // Handed the gate just as it was interrupted: pass it on.
              else handOff()
            })
          )
        )
      })
    })

  return {
    run: (lane, step) =>
      Effect.uninterruptibleMask((restore) =>
        Effect.zipRight(restore(acquire(lane)), Effect.ensuring(restore(step), Effect.sync(handOff)))
      )
  }
})
