/**
 * The limits of a public request, each refused as an InvalidRequest naming the field, the value and
 * the limit: a decision's labels per head, label length in tokens (past what the engine scores and
 * admission reserves memory for; refused by the Provider after tokenizing, and by the engine child
 * itself), head name length, and a generation's stop string length. The rules hold at every count
 * (properties over the schemas); the token limit is checked on the real decision model.
 */
import { assert, describe, it, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as fc from "effect/FastCheck"
import type { DecideRequest, GenerateRequest } from "../../src/domain/Inference.js"
import {
  MAX_HEAD_NAME,
  MAX_LABEL_TOKENS,
  MAX_LABELS,
  MAX_STOP_STRING,
  ValidDecideRequest,
  ValidGenerateRequest
} from "../../src/domain/RequestRules.js"
import { NativeWorker } from "../../src/services/NativeWorker.js"
import { Provider } from "../../src/services/Provider.js"
import { validate } from "../../src/services/provider/Validation.js"
import { runtimeLayer } from "../support/engine.js"

const validateDecide = validate(ValidDecideRequest)
const validateGenerate = validate(ValidGenerateRequest)

/** The refusal of a request, or undefined when it is valid. */
const refusal = <A, E>(checked: Effect.Effect<A, E>) => Either.getLeft(Effect.runSync(Effect.either(checked)))

const decision = (labels: number, name = "h"): DecideRequest => ({
  prompt: "is the sea calm?",
  heads: [{ name: "first", labels: ["yes", "no"] }, { name, labels: Array.from({ length: labels }, (_, i) => `label ${i}`) }]
})

describe("request limits", () => {
  it.prop("a head has at most MAX_LABELS labels: more are refused naming the head, the count and the limit", {
    labels: fc.integer({ min: 1, max: 3 * MAX_LABELS })
  }, ({ labels }) => {
    const refused = refusal(validateDecide(decision(labels)))
    if (labels <= MAX_LABELS) return assert.isTrue(refused._tag === "None")
    assert.isTrue(refused._tag === "Some")
    if (refused._tag === "Some") {
      assert.strictEqual(refused.value.field, "heads[1].labels")
      assert.strictEqual(refused.value.value, String(labels))
      assert.include(refused.value.message, `at most ${MAX_LABELS} labels`)
    }
  })

  it.prop("a head name has at most MAX_HEAD_NAME characters", { length: fc.integer({ min: 1, max: 3 * MAX_HEAD_NAME }) }, ({ length }) => {
    const refused = refusal(validateDecide(decision(2, "n".repeat(length))))
    assert.strictEqual(refused._tag === "Some", length > MAX_HEAD_NAME)
    if (refused._tag === "Some") {
      assert.strictEqual(refused.value.field, "heads[1].name")
      assert.include(refused.value.message, `at most ${MAX_HEAD_NAME} characters`)
    }
  })

  it.prop("a stop string has at most MAX_STOP_STRING characters: the first longer one is named", {
    lengths: fc.array(fc.integer({ min: 1, max: 3 * MAX_STOP_STRING }), { minLength: 1, maxLength: 4 })
  }, ({ lengths }) => {
    const request: GenerateRequest = {
      messages: [{ role: "user", content: "hi" }],
      maxTokens: 4,
      stop: lengths.map((n) => "s".repeat(n))
    }
    const refused = refusal(validateGenerate(request))
    const first = lengths.findIndex((n) => n > MAX_STOP_STRING)
    assert.strictEqual(refused._tag === "Some", first >= 0)
    if (refused._tag === "Some") {
      assert.strictEqual(refused.value.field, `stop[${first}]`)
      assert.include(refused.value.message, `at most ${MAX_STOP_STRING} characters`)
    }
  })

  layer(runtimeLayer(), { timeout: 120_000, excludeTestServices: true })("tiny and decision", (it) => {
    /** A label of the decision model with exactly `tokens` tokens: letters added one at a time. */
    const labelOf = (tokens: number) =>
      Effect.gen(function*() {
        const provider = yield* Provider
        const count = (text: string) => Effect.map(provider.tokenize({ role: "decision", text }), (r) => r.tokens.length)
        let label = ""
        while ((yield* count(label)) < tokens) label += "abcdefghij"[label.length % 10]
        assert.strictEqual(yield* count(label), tokens, `a label of exactly ${tokens} tokens`)
        return label
      })

    it.effect("a label of more than MAX_LABEL_TOKENS tokens is refused naming the label, its tokens and the limit; at the limit it is scored", () =>
      Effect.gen(function*() {
        const provider = yield* Provider
        const atLimit = yield* labelOf(MAX_LABEL_TOKENS)
        const over = yield* labelOf(MAX_LABEL_TOKENS + 1)
        const scored = yield* provider.decide({ prompt: "is the sea calm?", heads: [{ name: "h", labels: ["no", atLimit] }] })
        assert.strictEqual(scored.heads[0]!.labels.length, 2)
        const refused = yield* Effect.flip(
          provider.decide({ prompt: "is the sea calm?", heads: [{ name: "h", labels: ["no", atLimit] }, { name: "g", labels: [over] }] })
        )
        assert.strictEqual(refused._tag, "InvalidRequest")
        if (refused._tag === "InvalidRequest") {
          assert.strictEqual(refused.field, "heads[1].labels[0]")
          assert.strictEqual(refused.value, JSON.stringify(over))
          assert.include(refused.message, `is ${MAX_LABEL_TOKENS + 1} tokens of the decision model; a label has at most ${MAX_LABEL_TOKENS}`)
        }
      }))

    it.effect("the engine child refuses a longer label itself (a caller that skips the Provider)", () =>
      Effect.gen(function*() {
        const over = yield* labelOf(MAX_LABEL_TOKENS + 1)
        const worker = yield* NativeWorker
        const prompt = (yield* (yield* Provider).tokenize({ role: "decision", text: "is the sea calm?" })).tokens
        const refused = yield* Effect.flip(worker.score(prompt, [{ name: "h", labels: ["no", over] }]))
        assert.strictEqual(refused._tag, "InvalidRequest")
        assert.include(refused.message, `is ${MAX_LABEL_TOKENS + 1} tokens; a label has at most ${MAX_LABEL_TOKENS}`)
        // The child still scores.
        const heads = yield* worker.score(prompt, [{ name: "h", labels: ["yes", "no"] }])
        assert.strictEqual(heads[0]!.labels.length, 2)
      }))
  })
})
