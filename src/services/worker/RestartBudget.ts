/**
 * The engine child's restart budget as a Schedule (OTP-style restart intensity): fed one input per
 * failure, it continues while at most `intensity` failures fell within the last `period` (this one
 * included) and stops at the one that exceeds it. Restarts are immediate: the budget counts, it
 * does not delay. Its output is the window of failure times, for the supervisor's report.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import * as ScheduleDecision from "effect/ScheduleDecision"
import * as ScheduleInterval from "effect/ScheduleInterval"

export interface RestartBudget {
  /** Failures tolerated within one period. */
  readonly intensity: number
  /** Length of the sliding window. */
  readonly period: Duration.DurationInput
}

/** The failure times (clock milliseconds) within the window ending at the latest one. */
export type FailureWindow = ReadonlyArray<number>

/** Continues after each failure while the window holds at most `intensity` of them. */
export const schedule = (budget: RestartBudget): Schedule.Schedule<FailureWindow, unknown> => {
  const periodMillis = Duration.toMillis(budget.period)
  return Schedule.makeWithState<FailureWindow, unknown, FailureWindow>([], (now, _, history) => {
    const window = [...history.filter((t) => now - t < periodMillis), now]
    return Effect.succeed([
      window,
      window,
      window.length > budget.intensity ? ScheduleDecision.done : ScheduleDecision.continueWith(ScheduleInterval.after(now))
    ] as const)
  })
}

/** Whether a window (an output of `schedule`) exceeds the budget. */
export const isExhausted = (window: FailureWindow, budget: RestartBudget): boolean => window.length > budget.intensity
