/**
 * Properties of the streamed stop-string matcher against brute-force oracles over random texts,
 * random splits into pieces and random stop lists (repeated and overlapping stops, unicode).
 */
import { assert, describe, it } from "@effect/vitest"
import * as fc from "fast-check"
import * as StopStrings from "../../src/services/provider/StopStrings.js"

const codePoints = (s: string): Array<string> => Array.from(s)

const alphabet = ["a", "b", "c", "é", "😀"] as const
const word = (minLength: number, maxLength: number) =>
  fc.array(fc.constantFrom(...alphabet), { minLength, maxLength }).map((cs) => cs.join(""))

/** Stops with repeated characters, self-overlap ("abab"), overlap with each other, surrogate pairs, and "" (ignored). */
const stop = fc.oneof(
  word(1, 4),
  fc.constantFrom("aab", "abab", "aa", "ab", "ba", "b", "😀a", "é😀", "a😀😀", "")
)
const stopList = fc.array(stop, { maxLength: 4 })

/** A piece: random text, a whole stop, or a fragment of a stop (so stops straddle piece boundaries). */
const pieceFor = (stops: ReadonlyArray<string>) => {
  const real = stops.filter((s) => s.length > 0)
  if (real.length === 0) return word(0, 3)
  return fc.oneof(
    word(0, 3),
    fc.constantFrom(...real),
    fc.tuple(fc.constantFrom(...real), fc.nat(), fc.nat()).map(([s, i, j]) => {
      const cps = codePoints(s)
      const from = i % (cps.length + 1)
      return cps.slice(from, from + (j % (cps.length + 1))).join("")
    })
  )
}
const scenarioWith = (stops: fc.Arbitrary<Array<string>>) =>
  stops.chain((list) => fc.record({ stops: fc.constant(list), pieces: fc.array(pieceFor(list), { maxLength: 12 }) }))

/** True when some non-empty stop occurs strictly inside another (neither at its start nor at its end). */
const hasInfix = (stops: ReadonlyArray<string>) =>
  stops.some((inner) =>
    inner.length > 0 &&
    stops.some((outer) => {
      for (let i = 1; i + inner.length < outer.length; i++) if (outer.startsWith(inner, i)) return true
      return false
    })
  )

const real = (stops: ReadonlyArray<string>) => stops.filter((s) => s.length > 0)
const containsStop = (text: string, stops: ReadonlyArray<string>) => real(stops).some((s) => text.includes(s))

/** Oracle: the text cut before the earliest occurrence of any stop, or all of it. */
const cutAtEarliestStart = (text: string, stops: ReadonlyArray<string>): string => {
  let at = -1
  for (const s of real(stops)) {
    const i = text.indexOf(s)
    if (i >= 0 && (at < 0 || i < at)) at = i
  }
  return at < 0 ? text : text.slice(0, at)
}

/** Oracle for character-by-character streaming: cut before the stop that completes first (the longest on a tie). */
const cutAtFirstCompleted = (text: string, stops: ReadonlyArray<string>): string => {
  for (let end = 1; end <= text.length; end++) {
    const done = real(stops).filter((s) => s.length <= end && text.startsWith(s, end - s.length))
    if (done.length > 0) return text.slice(0, end - Math.max(...done.map((s) => s.length)))
  }
  return text
}

/** Oracle: the longest suffix of `text` that is a proper prefix of some stop. */
const mustHold = (text: string, stops: ReadonlyArray<string>): string => {
  for (let n = text.length; n > 0; n--) {
    const suffix = text.slice(text.length - n)
    if (real(stops).some((s) => s.length > n && s.startsWith(suffix))) return suffix
  }
  return ""
}

const loneSurrogate = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/

interface Step {
  readonly pushed: string
  readonly emit: string
  readonly stopped: boolean
}

/** Pushes pieces until a stop; the output (with flush when never stopped) and every step. */
const run = (stops: ReadonlyArray<string>, pieces: ReadonlyArray<string>) => {
  const matcher = StopStrings.make(stops)
  const steps: Array<Step> = []
  let pushed = ""
  for (const piece of pieces) {
    pushed += piece
    const scan = matcher.push(piece)
    steps.push({ pushed, emit: scan.emit, stopped: scan.stopped })
    if (scan.stopped) break
  }
  const stopped = steps.some((s) => s.stopped)
  const output = steps.map((s) => s.emit).join("") + (stopped ? "" : matcher.flush())
  return { output, stopped, steps }
}

/**
 * `it.prop` is typed for effect's bundled fast-check 3 (effect/FastCheck); these arbitraries come from
 * fast-check 4, so the properties run through `fc.assert` directly.
 */
const numRuns = 1000

describe("StopStrings properties", () => {
  it("the output is the text cut before the earliest stop, for any split (no stop strictly inside another)", () =>
    fc.assert(
      fc.property(scenarioWith(stopList.filter((stops) => !hasInfix(stops))), ({ pieces, stops }) => {
        const text = pieces.join("")
        const { output, stopped, steps } = run(stops, pieces)
        assert.strictEqual(output, cutAtEarliestStart(text, stops))
        assert.strictEqual(stopped, containsStop(text, stops))
        // It stops at the first piece after which a stop has appeared, not before and not later.
        for (const step of steps) assert.strictEqual(step.stopped, containsStop(step.pushed, stops), step.pushed)
      }),
      { numRuns }
    ))

  it("one code point per piece, any stops: the output is cut before the stop that completes first", () =>
    fc.assert(
      fc.property(scenarioWith(stopList), ({ pieces, stops }) => {
        const text = pieces.join("")
        const { output, stopped } = run(stops, codePoints(text))
        assert.strictEqual(output, cutAtFirstCompleted(text, stops))
        assert.strictEqual(stopped, containsStop(text, stops))
      }),
      { numRuns }
    ))

  it("held back exactly the longest suffix that could still start a stop; what is emitted never holds a stop", () =>
    fc.assert(
      fc.property(scenarioWith(stopList), ({ pieces, stops }) => {
        const { output, steps } = run(stops, pieces)
        let emitted = ""
        for (const step of steps) {
          emitted += step.emit
          assert.isFalse(loneSurrogate.test(step.emit), "an emit splits a surrogate pair")
          assert.isTrue(step.pushed.startsWith(emitted), "emitted text is a prefix of the pushed text")
          if (step.stopped) break
          const held = step.pushed.slice(emitted.length)
          assert.strictEqual(held, mustHold(step.pushed, stops), step.pushed)
          assert.isTrue(held === "" || real(stops).some((s) => s.length > held.length && s.startsWith(held)))
        }
        assert.isFalse(containsStop(output, stops), output)
      }),
      { numRuns }
    ))

  it("examples: repeated characters and self-overlapping stops", () => {
    assert.deepStrictEqual(run(["aab"], ["a", "a", "a", "b", "c"]).output, "a")
    assert.deepStrictEqual(run(["abab"], ["aba", "ca", "bab"]).output, "abac")
    assert.deepStrictEqual(run(["abab"], ["ab", "ac"]).output, "abac")
    assert.deepStrictEqual(run(["é😀"], ["xé", "😀y"]).output, "x")
    assert.deepStrictEqual(run([""], ["abc"]), { output: "abc", stopped: false, steps: [{ pushed: "abc", emit: "abc", stopped: false }] })
  })

  // When one stop lies strictly inside another, the result must not depend on how the text is split:
  // "b" completes before "abc" does, so both streaming "a", "b", "c" and pushing "abc" stop after "a".
  it("split invariance when a stop lies strictly inside another", () => {
    assert.strictEqual(run(["abc", "b"], ["abc"]).output, run(["abc", "b"], ["a", "b", "c"]).output)
  })
})
