/**
 * What a request costs before its first token: a prompt repeated on the same sequence keeps its
 * whole prefill (its cache holds it split as a cold run splits it), with output bit-identical to
 * the first run's; a prompt that only extends the cached one keeps whole prefill chunks.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import type { GenerateRequest } from "../../src/domain/Inference.js"
import { runtimeLayer } from "../support/engine.js"
import { collect, doneOf, probabilitiesOf, tokensOf } from "../support/generation.js"

const words = ["sea", "ship", "harbor", "wind", "sail", "crew", "light", "storm", "calm", "night", "map", "star"]
/** `n` words, different for each seed. */
const text = (seed: number, n: number) => Array.from({ length: n }, (_, i) => words[(seed * 7 + i * (seed + 3)) % words.length]).join(" ")

const request = (content: string): GenerateRequest => ({
  messages: [{ role: "user", content }],
  maxTokens: 6,
  sampling: { temperature: 0 },
  probabilities: true
})

describe("request set-up", () => {
  layer(runtimeLayer(), { timeout: 180_000, excludeTestServices: true })("tiny and decision", (it) => {
    it.effect("a repeated prompt keeps its whole prefill, and its output is the first run's bit for bit", () =>
      Effect.gen(function*() {
        // A short prompt (less than one prefill chunk) and one of several chunks.
        for (const [seed, n] of [[1, 6], [2, 300]] as const) {
          const first = yield* collect(request(text(seed, n)))
          assert.strictEqual(doneOf(first).usage.reusedTokens, 0, "the first run is cold")
          const again = yield* collect(request(text(seed, n)))
          const done = doneOf(again)
          // Everything but the last prompt token (evaluated to sample the first output token).
          assert.strictEqual(done.usage.reusedTokens, done.usage.promptTokens - 1)
          assert.deepStrictEqual(tokensOf(again), tokensOf(first))
          assert.deepStrictEqual(probabilitiesOf(again), probabilitiesOf(first), "probabilities differ")
        }
      }))

    it.effect("a prompt that extends the cached one keeps whole prefill chunks only", () =>
      Effect.gen(function*() {
        const base = text(5, 300)
        const first = doneOf(yield* collect(request(base)))
        const longer = doneOf(yield* collect(request(`${base} ${text(6, 20)}`)))
        assert.isAbove(first.usage.promptTokens, 256)
        assert.isAbove(longer.usage.reusedTokens, 0)
        assert.strictEqual(longer.usage.reusedTokens % 128, 0, "reuse ends on the prefill chunk grid")
      }))

    it.effect("a turn queued behind another of its conversation starts as the first ends (its End reaches the child first)", () =>
      Effect.gen(function*() {
        // The second turn of each pair waits for the conversation's slot and begins on the same
        // sequence as soon as the first lets go, while the first's End is not awaited.
        for (let pair = 0; pair < 4; pair++) {
          const conversation = `setup-${pair}`
          const [a, b] = yield* Effect.all([
            collect({ ...request(text(pair, 8)), conversation }),
            collect({ ...request(text(pair + 10, 8)), conversation })
          ], { concurrency: "unbounded" })
          assert.strictEqual(doneOf(a).usage.generatedTokens + doneOf(b).usage.generatedTokens > 0, true)
          assert.strictEqual(doneOf(a).stopReason === "maxTokens" || doneOf(a).stopReason === "endOfGeneration", true)
          assert.strictEqual(doneOf(b).stopReason === "maxTokens" || doneOf(b).stopReason === "endOfGeneration", true)
        }
      }))
  })
})
