/**
 * OTP-style restart intensity: more than `intensity` failures within `period` exhausts the budget.
 * Pure; the supervisor keeps the history and asks after each failure.
 */

export interface RestartBudget {
  /** Failures tolerated within one period. Default 3. */
  readonly intensity: number
  /** Length of the sliding window, in milliseconds. Default 60 000. */
  readonly periodMillis: number
}

/** Adds a failure at `now` and drops the ones that left the window. */
export const recordFailure = (history: ReadonlyArray<number>, now: number, budget: RestartBudget): Array<number> => [
  ...history.filter((t) => now - t < budget.periodMillis),
  now
]

/** True when the failures in the window exceed the intensity: stop restarting. */
export const isExhausted = (history: ReadonlyArray<number>, now: number, budget: RestartBudget): boolean =>
  history.filter((t) => now - t < budget.periodMillis).length > budget.intensity
