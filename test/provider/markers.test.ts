/**
 * The generation model's channel markers from its tokenizer: a marker text that tokenizes (special
 * tokens parsed) to one token is that marker; resolved once per loaded model. The real models are
 * in channels.test.ts (Qwen3's user-defined `<think>`); this covers the rule and the cache.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Markers from "../../src/services/provider/Markers.js"

/** A tokenizer that knows `<think>` and `</think>` as single tokens and spells anything else by character. */
const tokenizer = (calls: Array<string>) => (text: string) =>
  Effect.sync(() => {
    calls.push(text)
    const known: Record<string, number> = { "<think>": 151667, "</think>": 151668 }
    return known[text] !== undefined ? [known[text]!] : Array.from(text, (c) => c.charCodeAt(0))
  })

describe("channel markers from the model's vocabulary", () => {
  it.effect("a marker text that is one token is that marker; one spelled with several is absent", () =>
    Effect.gen(function*() {
      const markers = yield* Markers.resolve(tokenizer([]))
      assert.deepStrictEqual(markers, { thinkOpen: 151667, thinkClose: 151668, toolOpen: null, toolClose: null })
    }))

  it.effect("resolved once per model key; another key (a new engine or model) resolves again", () =>
    Effect.gen(function*() {
      const calls: Array<string> = []
      const cached = Markers.cache()
      const first = yield* cached("1:/models/a.gguf", tokenizer(calls))
      assert.deepStrictEqual(yield* cached("1:/models/a.gguf", tokenizer(calls)), first)
      assert.strictEqual(calls.length, 4)
      yield* cached("2:/models/a.gguf", tokenizer(calls))
      assert.strictEqual(calls.length, 8)
    }))
})
