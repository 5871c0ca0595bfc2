/**
 * How often a runner probes the others' loads (Load.paced), on TestClock: at rest a round every
 * `restingEvery`; from the moment the runner is active (it read the loads, or served a request for
 * another runner) a round every `probeEvery`, the first within `probeEvery`; back to resting
 * `activeFor` after its last activity.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as TestClock from "effect/TestClock"
import { defaultTiming, paced } from "../../src/cluster/Load.js"

const timing = { ...defaultTiming, probeEvery: "250 millis", restingEvery: "1 second", activeFor: "5 seconds" } as const

describe("load probe pace", () => {
  it.scoped("a round every second at rest, every 250 ms while active, resting again 5 s after the last activity", () =>
    Effect.gen(function*() {
      let rounds = 0
      let lastActive = Number.NEGATIVE_INFINITY
      yield* Effect.forkScoped(paced(Effect.sync(() => void rounds++), timing, () => lastActive))
      yield* TestClock.adjust("1 millis")
      assert.strictEqual(rounds, 1, "the first round at once")

      yield* TestClock.adjust("10 seconds")
      assert.strictEqual(rounds, 11, "at rest: one round a second")

      // Active at 10.2 s (between two wake-ups): the next round comes at the next wake-up, 10.25 s.
      yield* TestClock.adjust("200 millis")
      lastActive = 10_201
      const beforeActive = rounds
      yield* TestClock.adjust("50 millis")
      assert.strictEqual(rounds, beforeActive + 1, "probed within 250 ms of becoming active")

      // Active until 15.201 s: rounds every 250 ms until then.
      yield* TestClock.adjust("4950 millis")
      assert.strictEqual(rounds, beforeActive + 1 + 19, "active: four rounds a second")

      // Resting again: one round a second.
      const resting = rounds
      yield* TestClock.adjust("4 seconds")
      assert.strictEqual(rounds, resting + 4)
    }))
})
