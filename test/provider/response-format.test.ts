/**
 * Structured output: a `responseFormat` is decoded under a grammar in the engine, so even a
 * random-weight model answers with JSON that decodes against the schema, and the generation ends
 * (endOfGeneration) when the JSON value is complete. A schema the grammar cannot express exactly
 * is a typed InvalidRequest naming the part; maxTokens cut mid-JSON is stop reason maxTokens.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import { ensureModel } from "../../fixtures/models.js"
import type { GenerateChunk, GenerateRequest } from "../../src/domain/Inference.js"
import { NativeWorker } from "../../src/services/NativeWorker.js"
import { Provider } from "../../src/services/Provider.js"
import { runtimeLayer } from "../support/engine.js"
import { failureOf } from "../support/generation.js"

/** Characters (code points), as the grammar counts them. */
const codePoints = (s: string) => [...s].length

const person = {
  schema: {
    type: "object",
    properties: {
      name: { type: "string", minLength: 1, maxLength: 12 },
      age: { type: "integer" },
      mood: { type: "string", enum: ["calm", "busy", "away"] },
      tags: { type: "array", items: { type: "string", maxLength: 6 }, maxItems: 3 }
    },
    required: ["name", "age", "mood", "tags"],
    additionalProperties: false
  },
  decoded: Schema.Struct({
    name: Schema.String.pipe(Schema.filter((s) => codePoints(s) >= 1 && codePoints(s) <= 12)),
    age: Schema.Number.pipe(Schema.filter((n) => !Number.isFinite(n) || Number.isInteger(n))),
    mood: Schema.Literal("calm", "busy", "away"),
    tags: Schema.Array(Schema.String.pipe(Schema.filter((s) => codePoints(s) <= 6))).pipe(Schema.maxItems(3))
  })
}

const measurement = {
  schema: {
    type: "object",
    properties: {
      value: { type: "number" },
      unit: { const: "kg" },
      valid: { type: "boolean" },
      note: { oneOf: [{ type: "string", maxLength: 8 }, { type: "null" }] }
    }
  },
  decoded: Schema.Struct({
    value: Schema.Number,
    unit: Schema.Literal("kg"),
    valid: Schema.Boolean,
    note: Schema.NullOr(Schema.String)
  })
}

const nested = {
  schema: {
    type: "object",
    $defs: { point: { type: "object", properties: { x: { type: "integer" }, y: { type: "integer" } } } },
    properties: {
      kind: { oneOf: [{ const: "line" }, { const: "dot" }] },
      points: { type: "array", items: { $ref: "#/$defs/point" }, minItems: 1, maxItems: 2 }
    }
  },
  decoded: Schema.Struct({
    kind: Schema.Literal("line", "dot"),
    points: Schema.Array(Schema.Struct({ x: Schema.Number, y: Schema.Number })).pipe(Schema.minItems(1), Schema.maxItems(2))
  })
}

const schemas: Record<string, { readonly schema: Record<string, unknown>; readonly decoded: Schema.Schema.AnyNoContext }> = {
  person,
  measurement,
  nested
}

const messages = [{ role: "user", content: "Describe someone as JSON." }] as const

/** The answer text, the channels seen and the Done chunk of a generation. */
const run = (request: GenerateRequest) =>
  Effect.gen(function*() {
    const provider = yield* Provider
    const chunks = Chunk.toReadonlyArray(yield* Stream.runCollect(provider.generate(request)))
    const texts = chunks.filter((c): c is Extract<GenerateChunk, { _tag: "Text" }> => c._tag === "Text")
    const done = chunks.find((c): c is Extract<GenerateChunk, { _tag: "Done" }> => c._tag === "Done")
    assert(done !== undefined, "no Done chunk")
    return {
      answer: texts.filter((c) => c.channel === "answer").map((c) => c.text).join(""),
      channels: new Set(texts.map((c) => c.channel)),
      done
    }
  })

/** Each schema's answer parses as JSON and decodes against the schema; the grammar's end ends the generation. */
const decodesEverySchema = (maxTokens: number) =>
  Effect.forEach(Object.entries(schemas), ([name, { decoded, schema }]) =>
    Effect.gen(function*() {
      const { answer, channels, done } = yield* run({ messages, maxTokens, responseFormat: { type: "jsonSchema", schema } })
      assert.strictEqual(done.stopReason, "endOfGeneration", `${name}: ${answer}`)
      assert.deepStrictEqual([...channels], ["answer"], name)
      const value: unknown = JSON.parse(answer)
      const result = Schema.decodeUnknownEither(decoded, { onExcessProperty: "error" })(value)
      assert(result._tag === "Right", `${name}: ${answer} does not decode: ${result._tag === "Left" ? result.left.message : ""}`)
    }), { discard: true })

describe("response formats", () => {
  layer(runtimeLayer(), { timeout: 120_000, excludeTestServices: true })("tiny (random weights)", (it) => {
    it.effect("jsonSchema answers decode against their schemas and end with endOfGeneration", () => decodesEverySchema(400))

    it.effect("json gives a JSON object", () =>
      Effect.gen(function*() {
        const { answer, done } = yield* run({ messages, maxTokens: 400, responseFormat: { type: "json" } })
        assert.strictEqual(done.stopReason, "endOfGeneration", answer)
        const value: unknown = JSON.parse(answer)
        assert(typeof value === "object" && value !== null && !Array.isArray(value), answer)
      }))

    it.effect("the same request without a response format is not JSON (the grammar, not the model, makes it)", () =>
      Effect.gen(function*() {
        const { answer } = yield* run({ messages, maxTokens: 40 })
        assert.throws(() => JSON.parse(answer))
      }))

    it.effect("maxTokens cut mid-JSON is stop reason maxTokens, and the text is not valid JSON", () =>
      Effect.gen(function*() {
        const { answer, done } = yield* run({ messages, maxTokens: 5, responseFormat: { type: "jsonSchema", schema: person.schema } })
        assert.strictEqual(done.stopReason, "maxTokens")
        assert.strictEqual(done.usage.generatedTokens, 5)
        assert.isTrue(answer.startsWith("{"), answer)
        assert.throws(() => JSON.parse(answer))
      }))

    it.effect("a schema the grammar cannot express is an InvalidRequest naming the part", () =>
      Effect.gen(function*() {
        const provider = yield* Provider
        const refused = (schema: Record<string, unknown>) =>
          failureOf(Stream.runDrain(provider.generate({ messages, maxTokens: 8, responseFormat: { type: "jsonSchema", schema } })))
        const pattern = yield* refused({ type: "object", properties: { code: { type: "string", pattern: "^[A-Z]+$" } } })
        assert(pattern._tag === "InvalidRequest", pattern._tag)
        assert.strictEqual(pattern.field, "responseFormat.schema/properties/code/pattern")
        assert.match(pattern.reason, /not supported/)
        const anyOf = yield* refused({ anyOf: [{ type: "string" }, { type: "null" }] })
        assert(anyOf._tag === "InvalidRequest", anyOf._tag)
        assert.strictEqual(anyOf.field, "responseFormat.schema/anyOf")
        const ref = yield* refused({ type: "array", items: { $ref: "#/$defs/missing" } })
        assert(ref._tag === "InvalidRequest", ref._tag)
        assert.strictEqual(ref.field, "responseFormat.schema/items/$ref")
      }))
  })

  layer(runtimeLayer({}, { generation: ensureModel("qwen-decision") }), { timeout: 120_000, excludeTestServices: true })(
    "qwen-decision (random weights, Qwen3 vocabulary)",
    (it) => {
      it.effect("jsonSchema answers decode against their schemas", () => decodesEverySchema(400))
    }
  )

  layer(runtimeLayer({}, { generation: ensureModel("qwen-chat") }), { timeout: 120_000, excludeTestServices: true })(
    "qwen-chat (a model that thinks first)",
    (it) => {
      it.effect("with a response format there is no thought: the whole output is the JSON answer", () => decodesEverySchema(400))

      it.effect("with a response format the template skips thinking: the prompt ends in an empty thought", () =>
        Effect.gen(function*() {
          const worker = yield* NativeWorker
          const text = yield* worker.renderText("generation", messages, true, { thinking: false })
          assert.isTrue(text.endsWith("<|im_start|>assistant\n<think>\n\n</think>\n\n"), text)
          const withoutThinking = yield* worker.render("generation", messages, true, { thinking: false })
          const plain = yield* run({ messages, maxTokens: 4 })
          const structured = yield* run({ messages, maxTokens: 400, responseFormat: { type: "json" } })
          assert.strictEqual(structured.done.usage.promptTokens, withoutThinking.length)
          assert.isAbove(structured.done.usage.promptTokens, plain.done.usage.promptTokens)
        }))
    }
  )
})
