/**
 * The ring of finished generations behind readiness's `recentGenerations`: for any capacity and
 * any number of generations, it holds the last ones (at most the capacity), oldest first, each as
 * its Done chunk measured it.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as fc from "effect/FastCheck"
import type { GenerateChunk } from "../../src/domain/Inference.js"
import * as RecentGenerations from "../../src/services/provider/RecentGenerations.js"

const doneOf = (n: number): Extract<GenerateChunk, { readonly _tag: "Done" }> => ({
  _tag: "Done",
  stopReason: n % 2 === 0 ? "maxTokens" : "endOfGeneration",
  usage: { promptTokens: n + 10, reusedTokens: n, generatedTokens: n + 1, reuse: n === 0 ? "cold" : "prefix" },
  timings: { queueMillis: 1, firstTokenMillis: n * 2, decodeTokensPerSecond: n / 2, totalMillis: n * 3 }
})

describe("recent generations", () => {
  it.effect.prop(
    "keeps the last min(count, capacity) generations, oldest first",
    [fc.integer({ min: 1, max: 70 }), fc.integer({ min: 0, max: 200 })],
    ([capacity, count]) =>
      Effect.gen(function*() {
        const recent = RecentGenerations.make(capacity)
        for (let n = 0; n < count; n++) yield* recent.record(n % 3 === 0 ? "utility" : "foreground", doneOf(n))
        const kept = recent.list()
        const first = Math.max(0, count - capacity)
        assert.deepStrictEqual(kept.map((s) => s.generatedTokens - 1), Array.from({ length: count - first }, (_, i) => first + i))
        for (const sample of kept) {
          const n = sample.reusedTokens
          assert.strictEqual(sample.lane, n % 3 === 0 ? "utility" : "foreground")
          assert.strictEqual(sample.promptTokens, n + 10)
          assert.strictEqual(sample.firstTokenMillis, n * 2)
          assert.strictEqual(sample.decodeTokensPerSecond, n / 2)
          assert.strictEqual(sample.totalMillis, n * 3)
          assert.strictEqual(sample.stopReason, doneOf(n).stopReason)
          assert.strictEqual(sample.reuse, doneOf(n).usage.reuse)
        }
      })
  )

  it("holds RECENT_GENERATIONS by default", () => {
    const recent = RecentGenerations.make()
    for (let n = 0; n < RecentGenerations.RECENT_GENERATIONS + 5; n++) Effect.runSync(recent.record("foreground", doneOf(n)))
    assert.strictEqual(recent.list().length, RecentGenerations.RECENT_GENERATIONS)
    assert.strictEqual(recent.list()[0]!.reusedTokens, 5)
  })
})
