import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as fc from "effect/FastCheck"
import * as Schedule from "effect/Schedule"
import * as ScheduleDecision from "effect/ScheduleDecision"
import * as RestartBudget from "../../src/services/worker/RestartBudget.js"

/** Feeds failures at the given times to the budget; true for each one after which it restarts. */
const decisions = (budget: RestartBudget.RestartBudget, times: ReadonlyArray<number>) =>
  Effect.gen(function*() {
    const schedule = RestartBudget.schedule(budget)
    let state = schedule.initial
    const out: Array<boolean> = []
    for (const now of times) {
      const [next, , decision] = yield* schedule.step(now, undefined, state)
      state = next
      out.push(ScheduleDecision.isContinue(decision))
      if (ScheduleDecision.isDone(decision)) break
    }
    return out
  })

/** Non-decreasing failure times with gaps from 0 to 2.5 periods. */
const failureTimes = (periodMillis: number) =>
  fc.array(fc.integer({ min: 0, max: Math.floor(periodMillis * 2.5) }), { minLength: 1, maxLength: 40 }).map((gaps) =>
    gaps.reduce<Array<number>>((times, gap) => [...times, (times.at(-1) ?? 0) + gap], [])
  )

describe("RestartBudget", () => {
  it.effect.prop(
    "restarts exactly while at most `intensity` failures fall within any window of `period`",
    [fc.integer({ min: 0, max: 5 }), fc.integer({ min: 1, max: 1000 }).chain((period) => fc.tuple(fc.constant(period), failureTimes(period)))],
    ([intensity, [periodMillis, times]]) =>
      Effect.gen(function*() {
        const out = yield* decisions({ intensity, period: periodMillis }, times)
        // The reference: the failures in (now - period, now], this one included.
        const expected: Array<boolean> = []
        for (let i = 0; i < times.length; i++) {
          const inWindow = times.slice(0, i + 1).filter((t) => times[i]! - t < periodMillis).length
          expected.push(inWindow <= intensity)
          if (inWindow > intensity) break
        }
        assert.deepStrictEqual(out, expected)
        // So no window of `period` ever holds more than `intensity` failures that were restarted.
        const restarted = times.slice(0, out.filter(Boolean).length)
        for (const t of restarted) {
          assert.isAtMost(restarted.filter((u) => u >= t && u - t < periodMillis).length, intensity)
        }
      }),
    { fastCheck: { numRuns: 100 } }
  )

  it.effect("the output at exhaustion is the window that exceeded the budget", () =>
    Effect.gen(function*() {
      const budget = { intensity: 2, period: 60_000 }
      const out = yield* Effect.flip(
        Effect.retryOrElse(Effect.fail("crash"), RestartBudget.schedule(budget), (_, window) => Effect.fail(window))
      )
      assert.strictEqual(out.length, 3)
      assert.isTrue(RestartBudget.isExhausted(out, budget))
    }))

  it.effect("failures spread wider than the period never exhaust it", () =>
    Effect.gen(function*() {
      const out = yield* decisions({ intensity: 1, period: 1000 }, [0, 1000, 2000, 3000, 4000])
      assert.deepStrictEqual(out, [true, true, true, true, true])
      const driver = yield* Schedule.driver(RestartBudget.schedule({ intensity: 0, period: 1000 }))
      assert.isTrue(yield* Effect.isFailure(driver.next(undefined)))
    }))
})
