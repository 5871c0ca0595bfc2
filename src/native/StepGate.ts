/**
 * The engine's step gate: one step at a time, and at every step boundary the next step goes to
 * the highest lane waiting (decision, foreground, utility, preparation), first come first served
 * within a lane. A generation re-queues for each step, so generations of one lane interleave step
 * by step and a decision submitted mid-generation runs at the next boundary. A capacity of one
 * behind the lane queue (internal/LaneQueue.ts): an interrupted waiter leaves the queue, and a
 * step holding the gate gives it back exactly once, wherever it is interrupted.
 *
 * Batchable steps (one decoded token of a generation, on the generation context) are one step
 * together: when the head of the queue is batchable, it and every batchable step queued right
 * behind it (in serving order, up to the first step that is not batchable) start at once, in one
 * synchronous pass, so node-llama-cpp evaluates them in one native batch; the gate is free again
 * when the last of them settles. Nothing is served before a step ahead of it, so lane order holds:
 * a decision queued during a batch runs at the next boundary. After a batch the gate waits one
 * event-loop turn before serving, so that the members, which re-queue as soon as their fibers
 * resume, form the next batch together instead of one by one.
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as FiberId from "effect/FiberId"

import * as LaneQueue from "../internal/LaneQueue.js"
import type { Lane } from "./Protocol.js"

export interface StepGate {
  /** Runs `step` when the gate is free and no higher-priority or earlier same-lane waiter remains. */
  readonly run: <A, E, R>(lane: Lane, step: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
  /**
   * Runs `start` as a batchable step: started by the gate together with the batchable steps queued
   * behind it, and settled when it settles (its rejection is the failure). Once started, an
   * interruption waits for it to settle.
   */
  readonly batch: <A>(lane: Lane, start: () => Promise<A>) => Effect.Effect<A, unknown>
  /** Whether a step of `lane` or a higher lane waits now (a long step then ends at its next native call). */
  readonly contended: (lane: Lane) => boolean
  /** Batches started so far (each one native evaluation) and the steps they held. */
  readonly batches: () => { readonly batches: number; readonly steps: number }
}

interface Exclusive {
  readonly _tag: "Exclusive"
}

interface Batchable {
  readonly _tag: "Batchable"
  /** Starts the native call; settles (never rejects) when it has settled and its waiter has its result. */
  readonly start: () => Promise<void>
  /** Set when the gate started it (as a member of the batch being served). */
  started: boolean
}

type Step = Exclusive | Batchable

const exclusive: Exclusive = { _tag: "Exclusive" }

export const make: Effect.Effect<StepGate> = Effect.sync(() => {
  /** What holds the gate: nothing, an exclusive step, a batch of this many unsettled members, or the turn after a batch. */
  let holder: "free" | "exclusive" | "settling" | number = "free"
  let batches = 0
  let batchedSteps = 0

  const settleOne = () => {
    if (typeof holder !== "number") return
    holder -= 1
    if (holder > 0) return
    holder = "settling"
    setImmediate(() => {
      holder = "free"
      gate.unsafeDispatch()
    })
  }

  /** Starts the batchable steps at the head of the queue (`first` and those right behind it). */
  const startBatch = (first: Batchable): void => {
    // Served from the queue, `first` is its head; a newcomer at a free gate runs alone.
    const waiting = gate.waiting()
    const members: Array<Batchable> = []
    if (waiting[0] === first) {
      for (const step of waiting) {
        if (step._tag !== "Batchable") break
        members.push(step)
      }
    } else {
      members.push(first)
    }
    holder = members.length
    batches += 1
    batchedSteps += members.length
    for (const member of members) {
      member.started = true
      // Started synchronously, one after another: their native decodes queue in the same turn.
      void member.start().finally(settleOne)
    }
  }

  const gate = LaneQueue.make<Step, Step>({
    take: (step) => {
      if (step._tag === "Batchable" && step.started) return step
      if (holder !== "free") return undefined
      if (step._tag === "Exclusive") holder = "exclusive"
      else startBatch(step)
      return step
    },
    give: (step) => {
      // A batch member's capacity comes back when the batch settles, not when its waiter leaves.
      if (step._tag === "Exclusive") holder = "free"
    }
  })

  return {
    run: (lane, step) => gate.withGrant(lane, exclusive, () => step),
    batch: <A>(lane: Lane, start: () => Promise<A>) =>
      Effect.suspend(() => {
        const settled = Deferred.unsafeMake<A, unknown>(FiberId.none)
        const step: Batchable = {
          _tag: "Batchable",
          start: () =>
            (async () => start())().then(
              (a) => void Deferred.unsafeDone(settled, Exit.succeed(a)),
              (cause: unknown) => void Deferred.unsafeDone(settled, Exit.fail(cause))
            ),
          started: false
        }
        return gate.withGrant(lane, step, () => Effect.uninterruptible(Deferred.await(settled)))
      }),
    contended: (lane) => gate.waitsAtOrAbove(lane),
    batches: () => ({ batches, steps: batchedSteps })
  }
})
