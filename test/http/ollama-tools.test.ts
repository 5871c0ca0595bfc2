/**
 * Tool calls through Ollama's API and its JS client, on qwen-tool (Qwen3's tokenizer and template,
 * a scripted reply that thinks, then calls `get_weather` for Paris): the call comes back as
 * `message.tool_calls` (streamed and whole), and a client that sends the call and the tool's
 * answer back (with `tool_name`, as Ollama's clients do) continues the conversation, under a
 * conversation key from the cached turn.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { Ollama, type Message, type Tool } from "ollama"
import { OllamaTest } from "./ollama-support.js"

const tools: Array<Tool> = [{
  type: "function",
  function: {
    name: "get_weather",
    description: "The weather in a city",
    parameters: { type: "object", properties: { city: { type: "string", description: "The city" } }, required: ["city"] }
  }
}]

const question: Array<Message> = [{ role: "user", content: "What is the weather in Paris?" }]

const collect = <A>(parts: AsyncIterable<A>) =>
  Effect.promise(async () => {
    const all: Array<A> = []
    for await (const part of parts) all.push(part)
    return all
  })

/** A field Ollama's client types do not declare (the response carries it). */
const extra = (value: object, field: string): unknown => new Map(Object.entries(value)).get(field)

describe("Ollama's API: tool calls", () => {
  layer(OllamaTest.layer({ generation: "qwen-tool", decision: "qwen-decision" }), { timeout: 180_000, excludeTestServices: true })(
    "qwen-tool through the ollama client",
    (it) => {
      it.effect("a tool call comes back as message.tool_calls, with the thought apart", () =>
        Effect.gen(function*() {
          const { client } = yield* OllamaTest
          const reply = yield* Effect.promise(() => client.chat({ model: "qwen-tool", messages: question, tools, options: { num_predict: 128 } }))
          assert.strictEqual(reply.done_reason, "stop")
          assert.include(reply.message.thinking ?? "", "so I call a tool")
          assert.strictEqual(reply.message.tool_calls?.length, 1)
          const [call] = reply.message.tool_calls ?? []
          assert.strictEqual(call?.function.name, "get_weather")
          assert.deepStrictEqual(call?.function.arguments, { city: "Paris" })
          assert.strictEqual(extra(call?.function ?? {}, "index"), 0)
          assert.strictEqual(typeof extra(call ?? {}, "id"), "string")
          assert.strictEqual(reply.message.content.trim(), "")
        }))

      it.effect("streamed, the call is one part of its own", () =>
        Effect.gen(function*() {
          const { client } = yield* OllamaTest
          const parts = yield* collect(yield* Effect.promise(() =>
            client.chat({ model: "qwen-tool", messages: question, tools, stream: true, options: { num_predict: 128 } })
          ))
          const calls = parts.flatMap((p) => p.message.tool_calls ?? [])
          assert.deepStrictEqual(calls.map((c) => [c.function.name, c.function.arguments]), [["get_weather", { city: "Paris" }]])
          assert.strictEqual(parts.at(-1)?.done_reason, "stop")
        }))

      it.effect("the call and the tool's answer sent back continue the conversation, from the cached turn under a key", () =>
        Effect.gen(function*() {
          const { baseUrl } = yield* OllamaTest
          const keyed = new Ollama({ host: baseUrl, headers: { "X-Nativegen-Conversation": "ollama-tools-1" } })
          const first = yield* Effect.promise(() => keyed.chat({ model: "qwen-tool", messages: question, tools, options: { num_predict: 128 } }))
          const history: Array<Message> = [
            ...question,
            { role: "assistant", content: first.message.content, ...(first.message.tool_calls === undefined ? {} : { tool_calls: first.message.tool_calls }) },
            { role: "tool", content: "{\"temperature\": 18, \"sky\": \"clear\"}", tool_name: "get_weather" }
          ]
          const second = yield* Effect.promise(() => keyed.chat({ model: "qwen-tool", messages: history, tools, options: { num_predict: 128 } }))
          assert.isTrue(second.done)
          const reuse = extra(second, "nativegen")
          assert(typeof reuse === "object" && reuse !== null, JSON.stringify(second))
          assert.strictEqual(extra(reuse, "reuse"), "continuation")
          assert.isAbove(Number(extra(reuse, "reused_tokens")), first.prompt_eval_count)
        }))
    }
  )
})
