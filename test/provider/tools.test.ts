/**
 * Tools end to end on the real engine (threads 1) with the scripted Qwen3 models: a request's
 * tools reach Qwen3's template, the scripted `<tool_call>` comes back as a ToolCall chunk (name
 * and parsed arguments) and the turn ends with `toolCalls`; `thinking: false` reaches the
 * template; a tool result turn renders; a broken call (a script whose JSON is cut short) is a
 * MalformedToolCall chunk naming the text, and the answer after it still arrives; tool lists over
 * the limits are refused with an InvalidRequest naming the limit.
 */
import { afterAll, assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { ensureModel } from "../../fixtures/models.js"
import { generateQwen3Model, qwen3Specs } from "../../fixtures/qwen3-models.js"
import type { Script } from "../../fixtures/script.js"
import type { ChatMessage, ToolDefinition } from "../../src/domain/Inference.js"
import { NativeWorker } from "../../src/services/NativeWorker.js"
import { Provider } from "../../src/services/Provider.js"
import { MAX_TOOLS, MAX_TOOLS_BYTES } from "../../src/domain/RequestRules.js"
import { runtimeLayer } from "../support/engine.js"
import { collect, doneOf, failureOf, textOf } from "../support/generation.js"

const weather: ToolDefinition = {
  name: "get_weather",
  description: "The weather of a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] }
}
const question: ChatMessage = { role: "user", content: "What is the weather in Paris?" }

/** The tool script with its JSON cut short, then an answer after the call. */
const brokenScript: Script = {
  startsAfter: ["\n"],
  parts: [
    { special: "<think>" },
    { text: "A tool.\n" },
    { special: "</think>" },
    { text: "\n\n" },
    { special: "<tool_call>" },
    { text: '{"name": "get_weather","arguments":{"city":"Paris"' },
    { special: "</tool_call>" },
    { text: "Sorry, that went wrong." },
    { special: "<|im_end|>" }
  ]
}
const directory = Fs.mkdtempSync(Path.join(Os.tmpdir(), "nativegen-tools-"))
const brokenPath = Path.join(directory, "qwen-tool-broken.gguf")
generateQwen3Model({
  ...qwen3Specs["qwen-tool"],
  name: "qwen-tool-broken",
  seed: "nativegen/qwen-tool-broken/1",
  weights: { kind: "scripted", script: brokenScript, margin: 24 }
}, brokenPath)
afterAll(() => Fs.rmSync(directory, { recursive: true, force: true }))

describe("tools in requests", () => {
  layer(runtimeLayer({}, { generation: ensureModel("qwen-tool") }), { timeout: 180_000, excludeTestServices: true })("qwen-tool", (it) => {
    it.effect("the scripted call comes back as a ToolCall chunk with parsed arguments; the turn ends with toolCalls", () =>
      Effect.gen(function*() {
        const worker = yield* NativeWorker
        const chunks = yield* collect({ messages: [question], tools: [weather], maxTokens: 64 })
        const calls = chunks.filter((c) => c._tag === "ToolCall")
        assert.strictEqual(calls.length, 1)
        const [call] = calls
        assert(call?._tag === "ToolCall")
        assert.strictEqual(call.name, "get_weather")
        assert.deepStrictEqual(call.arguments, { city: "Paris" })
        assert.isNotEmpty(call.id)
        assert.include(textOf(chunks, "thought"), "weather in Paris")
        // No tool text leaks as Text, and no marker either.
        assert.isFalse(chunks.some((c) => c._tag === "Text" && (c.channel === "tool" || /<\/?tool_call>/.test(c.text))))
        const done = doneOf(chunks)
        assert.strictEqual(done.stopReason, "toolCalls")
        // The tools were in the prompt: exactly the template's rendering with them, longer than without.
        const withTools = yield* worker.render("generation", [question], true, { tools: [weather] })
        const without = yield* worker.render("generation", [question], true)
        assert.strictEqual(done.usage.promptTokens, withTools.length)
        assert.isAbove(withTools.length, without.length)
      }))

    it.effect("thinking false reaches the template: the prompt holds an empty thought and the reply is the call alone", () =>
      Effect.gen(function*() {
        const chunks = yield* collect({ messages: [question], tools: [weather], thinking: false, maxTokens: 64 })
        assert.strictEqual(textOf(chunks, "thought"), "")
        assert.deepStrictEqual(chunks.filter((c) => c._tag === "ToolCall").map((c) => c._tag === "ToolCall" && c.name), ["get_weather"])
        assert.strictEqual(doneOf(chunks).stopReason, "toolCalls")
      }))

    it.effect("a tool result turn: the assistant's call and the tool's answer are rendered into the prompt", () =>
      Effect.gen(function*() {
        const worker = yield* NativeWorker
        const history: ReadonlyArray<ChatMessage> = [
          question,
          { role: "assistant", content: "", reasoning: "I call the tool.", toolCalls: [{ id: "c0", name: "get_weather", arguments: { city: "Paris" } }] },
          { role: "tool", content: "{\"temperature\": 21}", toolCallId: "c0" }
        ]
        const chunks = yield* collect({ messages: history, tools: [weather], maxTokens: 64 })
        const done = doneOf(chunks)
        const text = yield* worker.renderText("generation", history, true, { tools: [weather] })
        assert.include(text, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>")
        assert.include(text, "<tool_response>\n{\"temperature\": 21}\n</tool_response>")
        assert.strictEqual(done.usage.promptTokens, (yield* worker.render("generation", history, true, { tools: [weather] })).length)
      }))

    it.effect("too many tools, too many bytes of them, a repeated name, a bad name or a non-object schema: InvalidRequest naming the rule", () =>
      Effect.gen(function*() {
        const provider = yield* Provider
        const refused = (tools: ReadonlyArray<ToolDefinition>) =>
          failureOf(Stream.runDrain(provider.generate({ messages: [question], tools, maxTokens: 8 })))
        const many = Array.from({ length: MAX_TOOLS + 1 }, (_, i) => ({ ...weather, name: `tool_${i}` }))
        const count = yield* refused(many)
        assert(count._tag === "InvalidRequest")
        assert.deepStrictEqual([count.field, count.value, count.reason], ["tools", String(MAX_TOOLS + 1), `at most ${MAX_TOOLS} tools`])
        const large = yield* refused([{ ...weather, description: "x".repeat(MAX_TOOLS_BYTES) }])
        assert(large._tag === "InvalidRequest")
        assert.strictEqual(large.reason, `at most ${MAX_TOOLS_BYTES} bytes of tool definitions (JSON)`)
        const repeated = yield* refused([weather, weather])
        assert(repeated._tag === "InvalidRequest")
        assert.deepStrictEqual([repeated.field, repeated.reason], ["tools[1].name", "tool names must be unique"])
        const badName = yield* refused([{ ...weather, name: "get weather" }])
        assert(badName._tag === "InvalidRequest")
        assert.strictEqual(badName.field, "tools[0].name")
        const notObject = yield* refused([{ ...weather, parameters: { type: "string" } }])
        assert(notObject._tag === "InvalidRequest")
        assert.strictEqual(notObject.field, "tools[0].parameters")
        // The limit itself is accepted.
        const atLimit = yield* collect({ messages: [question], tools: many.slice(0, MAX_TOOLS), thinking: false, maxTokens: 64 })
        assert.strictEqual(doneOf(atLimit).stopReason, "toolCalls")
      }))
  })

  layer(runtimeLayer({}, { generation: brokenPath }), { timeout: 180_000, excludeTestServices: true })("broken tool call", (it) => {
    it.effect("a call whose JSON is cut short is a MalformedToolCall naming the text; the answer after it still arrives", () =>
      Effect.gen(function*() {
        const chunks = yield* collect({ messages: [question], tools: [weather], maxTokens: 64 })
        const malformed = chunks.filter((c) => c._tag === "MalformedToolCall")
        assert.strictEqual(malformed.length, 1)
        const [call] = malformed
        assert(call?._tag === "MalformedToolCall")
        assert.strictEqual(call.text, "{\"name\": \"get_weather\",\"arguments\":{\"city\":\"Paris\"")
        assert.match(call.reason, /^not JSON/)
        assert.isFalse(chunks.some((c) => c._tag === "ToolCall"))
        assert.strictEqual(textOf(chunks, "answer").trim(), "Sorry, that went wrong.")
        assert.strictEqual(doneOf(chunks).stopReason, "endOfGeneration")
      }))
  })
})
