/** The peer benchmark's statistics: medians, ranges and paired ratios over rounds. */
import { assert, describe, it } from "@effect/vitest"
import * as fc from "effect/FastCheck"
import { median, pairedRatio, perSecond, summarize } from "../../bench/peer/Stats.js"

const figure = fc.double({ min: 1e-3, max: 1e6, noNaN: true })

describe("bench/peer Stats", () => {
  it("the median of an odd count is the middle value, of an even count the mean of the middle two", () => {
    assert.strictEqual(median([3, 1, 2]), 2)
    assert.strictEqual(median([4, 1, 3, 2]), 2.5)
    assert.isNaN(median([]))
  })

  it.prop("the median lies within the range, and the summary keeps every round in order", [fc.array(figure, { minLength: 1, maxLength: 20 })], ([xs]) => {
    const s = summarize(xs)
    return s.min <= s.median && s.median <= s.max && s.rounds.length === xs.length && s.rounds.every((x, i) => x === xs[i])
  })

  it.prop("a paired ratio is taken per round: the same factor on every round gives that factor", [fc.array(figure, { minLength: 1, maxLength: 10 }), fc.double({ min: 0.01, max: 100, noNaN: true })], ([xs, k]) => {
    const r = pairedRatio(xs.map((x) => x * k), xs)
    return Math.abs(r.median - k) <= 1e-9 * k && Math.abs(r.min - k) <= 1e-9 * k && Math.abs(r.max - k) <= 1e-9 * k
  })

  it("rounds of different counts cannot be paired", () => {
    assert.throws(() => pairedRatio([1, 2], [1]), /paired rounds differ in count: 2 and 1/)
  })

  it("tokens per second from a count and milliseconds", () => {
    assert.strictEqual(perSecond(50, 500), 100)
  })
})
