/**
 * The engine's step gate: one step at a time, and at every step boundary the next step goes to
 * the highest lane waiting (decision, foreground, utility, preparation), first come first served
 * within a lane. A generation re-queues for each step, so generations of one lane interleave step
 * by step and a decision submitted mid-generation runs at the next boundary. A capacity of one
 * behind the lane queue (internal/LaneQueue.ts): an interrupted waiter leaves the queue, and a
 * step holding the gate gives it back exactly once, wherever it is interrupted.
 */
import * as Effect from "effect/Effect"

import * as LaneQueue from "../internal/LaneQueue.js"
import type { Lane } from "./Protocol.js"

export interface StepGate {
  /** Runs `step` when the gate is free and no higher-priority or earlier same-lane waiter remains. */
  readonly run: <A, E, R>(lane: Lane, step: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
}

export const make: Effect.Effect<StepGate> = Effect.sync(() => {
  let busy = false
  const gate = LaneQueue.make<void, true>({
    take: () => {
      if (busy) return undefined
      busy = true
      return true
    },
    give: () => {
      busy = false
    }
  })
  return {
    run: (lane, step) => gate.withGrant(lane, undefined, () => step)
  }
})
