/**
 * Tool calls through OpenAI's API with the official client, on qwen-tool (Qwen3's template,
 * scripted to think and then call `get_weather` for Paris): the call comes back as `tool_calls`
 * (arguments as a JSON string) with the finish reason `tool_calls`, whole and streamed (with its
 * index); the next turn, with the tool's answer, resent under the conversation key, continues the
 * checkpoint; tool choice `none` offers no tools.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import OpenAI from "openai"
import { ensureModel } from "../../fixtures/models.js"
import { call } from "./openai-support.js"
import { HttpTest } from "./support.js"

const MODEL = "qwen-tool"
const question: Array<OpenAI.ChatCompletionMessageParam> = [{ role: "user", content: "What is the weather in Paris?" }]
const tools: Array<OpenAI.ChatCompletionTool> = [{
  type: "function",
  function: {
    name: "get_weather",
    description: "The weather of a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] }
  }
}]

describe("OpenAI API: tool calls on qwen-tool", () => {
  layer(HttpTest.layer({ models: { generation: ensureModel("qwen-tool") } }), { timeout: 180_000, excludeTestServices: true })((it) => {
    it.effect("a whole chat with tools: the call as tool_calls, finish reason tool_calls, the thought kept apart", () =>
      Effect.gen(function*() {
        const completion = yield* call((openai) => openai.chat.completions.create({ model: MODEL, messages: question, tools, max_tokens: 64 }))
        const [choice] = completion.choices
        assert.strictEqual(choice?.finish_reason, "tool_calls")
        // The script's blank line between the thought and the call is content, as generated.
        assert.strictEqual(choice?.message.content?.trim(), "")
        assert.include((choice?.message as unknown as { reasoning_content: string }).reasoning_content, "weather in Paris")
        const [toolCall] = choice?.message.tool_calls ?? []
        assert(toolCall?.type === "function")
        assert.isNotEmpty(toolCall.id)
        assert.strictEqual(toolCall.function.name, "get_weather")
        assert.deepStrictEqual(JSON.parse(toolCall.function.arguments), { city: "Paris" })
      }))

    it.effect("streamed: one tool_calls delta at index 0 with the id, name and arguments", () =>
      Effect.gen(function*() {
        const chunks = yield* call(async (openai) => {
          const stream = await openai.chat.completions.create({ model: MODEL, messages: question, tools, max_tokens: 64, stream: true })
          const all = []
          for await (const chunk of stream) all.push(chunk)
          return all
        })
        const calls = chunks.flatMap((c) => c.choices[0]?.delta.tool_calls ?? [])
        assert.strictEqual(calls.length, 1)
        assert.deepStrictEqual([calls[0]?.index, calls[0]?.type, calls[0]?.function?.name], [0, "function", "get_weather"])
        assert.isNotEmpty(calls[0]?.id)
        assert.deepStrictEqual(JSON.parse(calls[0]?.function?.arguments ?? ""), { city: "Paris" })
        assert.deepStrictEqual(chunks.flatMap((c) => c.choices.flatMap((x) => (x.finish_reason === null ? [] : [x.finish_reason]))), ["tool_calls"])
      }))

    it.effect("the tool's answer resent with the history under the key continues the checkpoint", () =>
      Effect.gen(function*() {
        const headers = { "X-Nativegen-Conversation": "openai-tools-conversation" }
        const first = yield* call((openai) => openai.chat.completions.create({ model: MODEL, messages: question, tools, max_tokens: 64 }, { headers }))
        const message = first.choices[0]!.message
        const toolCall = message.tool_calls![0]!
        const second = yield* call((openai) =>
          openai.chat.completions.create({
            model: MODEL,
            tools,
            max_tokens: 64,
            messages: [
              ...question,
              { role: "assistant", content: message.content, tool_calls: message.tool_calls! },
              { role: "tool", tool_call_id: toolCall.id, content: "{\"temperature\": 21}" }
            ]
          }, { headers })
        )
        assert.strictEqual((second as unknown as { nativegen: { reuse: string } }).nativegen.reuse, "continuation")
        assert.isAbove(second.usage?.prompt_tokens_details?.cached_tokens ?? 0, 0)
      }))

    it.effect("tool_choice none: the tools are not offered, so the prompt is the chat alone", () =>
      Effect.gen(function*() {
        const offered = yield* call((openai) => openai.chat.completions.create({ model: MODEL, messages: question, tools, max_tokens: 1 }))
        const none = yield* call((openai) =>
          openai.chat.completions.create({ model: MODEL, messages: question, tools, tool_choice: "none", max_tokens: 1 })
        )
        const without = yield* call((openai) => openai.chat.completions.create({ model: MODEL, messages: question, max_tokens: 1 }))
        assert.strictEqual(none.usage?.prompt_tokens, without.usage?.prompt_tokens)
        assert.isAbove(offered.usage?.prompt_tokens ?? 0, none.usage?.prompt_tokens ?? 0)
      }))
  })
})
