/**
 * Statistics of benchmark rounds: a summary (median, range, every round) of a list of figures, and
 * the ratio of two summaries' medians.
 */
import * as Schema from "effect/Schema"

/** A figure over rounds: its median, smallest and largest value, and every round in order. */
export const Summary = Schema.Struct({
  median: Schema.Number,
  min: Schema.Number,
  max: Schema.Number,
  rounds: Schema.Array(Schema.Number)
})
export type Summary = typeof Summary.Type

/** The median of `xs` (the mean of the two middle values for an even count; NaN when empty). */
export const median = (xs: ReadonlyArray<number>): number => {
  if (xs.length === 0) return Number.NaN
  const sorted = [...xs].sort((a, b) => a - b)
  const middle = sorted.length >> 1
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2
}

export const summarize = (rounds: ReadonlyArray<number>): Summary => ({
  median: median(rounds),
  min: rounds.length === 0 ? Number.NaN : Math.min(...rounds),
  max: rounds.length === 0 ? Number.NaN : Math.max(...rounds),
  rounds: [...rounds]
})

/**
 * The ratio of two sides measured in the same rounds: per round `a[i] / b[i]` (so that the load of
 * one round falls on both sides of its ratio), summarized.
 */
export const pairedRatio = (a: ReadonlyArray<number>, b: ReadonlyArray<number>): Summary => {
  if (a.length !== b.length) throw new RangeError(`paired rounds differ in count: ${a.length} and ${b.length}`)
  return summarize(a.map((x, i) => x / b[i]!))
}

/** Tokens per second from a token count and the milliseconds they took. */
export const perSecond = (count: number, millis: number): number => (count * 1000) / millis
