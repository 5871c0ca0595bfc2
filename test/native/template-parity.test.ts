/**
 * Template parity through the engine's own path: requests' messages, tools and `thinking` go
 * through `src/native/engine/Templates.ts` (the variables it builds, the template parsed from the
 * model's `tokenizer.chat_template` by @huggingface/jinja) and give exactly the text node-llama-cpp
 * renders for the same chat with Qwen3's real template (`resolveChatWrapper(model)` resolves its
 * Qwen wrapper, whose `generateContextState` renders the history). Covered: a single turn, a system
 * prompt, multi-turn with thoughts (as `reasoning` and inline `<think>`), thinking disabled, tools
 * offered, a tool call with its result in the current turn, and a tool call in an earlier turn.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type { ChatHistoryItem, ChatModelFunctions, ChatWrapper, LlamaModel } from "node-llama-cpp"
import { QwenChatWrapper, resolveChatWrapper } from "node-llama-cpp"
import type { ChatMessage, ToolDefinition } from "../../src/domain/Inference.js"
import type { TemplateInputs } from "../../src/native/Protocol.js"
import * as Templates from "../../src/native/engine/Templates.js"
import { loadModel, TestLlamaLive } from "../fixtures/llama.js"

class Rendering extends Context.Tag("test/TemplateParity")<Rendering, {
  readonly model: LlamaModel
  readonly wrapper: ChatWrapper
  readonly templated: Templates.Templated
}>() {}

const RenderingLive = Layer.scoped(
  Rendering,
  Effect.gen(function*() {
    const model = yield* loadModel("qwen-chat", { vocabOnly: true })
    const wrapper = resolveChatWrapper(model)
    if (wrapper === null) return yield* Effect.dieMessage("node-llama-cpp resolved no chat wrapper")
    const template = Templates.parseTemplate(model.fileInfo.metadata.tokenizer.chat_template)
    return { model, wrapper, templated: { model, modelPath: model.filename ?? "qwen-chat", template } }
  })
).pipe(Layer.provide(TestLlamaLive))

const weatherParameters = {
  type: "object",
  properties: { city: { type: "string", description: "City name" } },
  required: ["city"]
} as const

const weather: ToolDefinition = { name: "get_weather", description: "The weather of a city", parameters: weatherParameters }
const functions: ChatModelFunctions = { get_weather: { description: "The weather of a city", params: weatherParameters } }

/** One chat in both forms: our request's messages and template inputs, and node-llama-cpp's history. */
interface Case {
  readonly name: string
  readonly messages: ReadonlyArray<ChatMessage>
  readonly inputs?: TemplateInputs
  readonly history: Array<ChatHistoryItem>
  readonly functions?: ChatModelFunctions
  /** The node-llama-cpp wrapper that matches `inputs` (default: the one it resolves). */
  readonly wrapper?: ChatWrapper
}

const cases: ReadonlyArray<Case> = [
  {
    name: "a single user turn",
    messages: [{ role: "user", content: "Hello there" }],
    history: [{ type: "user", text: "Hello there" }, { type: "model", response: [] }]
  },
  {
    name: "a system prompt",
    messages: [{ role: "system", content: "You are terse." }, { role: "user", content: "Say hi\nin two lines" }],
    history: [{ type: "system", text: "You are terse." }, { type: "user", text: "Say hi\nin two lines" }, { type: "model", response: [] }]
  },
  {
    name: "multi-turn with thoughts, as reasoning and inline (earlier thoughts are dropped)",
    messages: [
      { role: "system", content: "Be kind." },
      { role: "user", content: "Hi" },
      { role: "assistant", content: "Hello!", reasoning: "They greet me." },
      { role: "user", content: "How are you?" },
      { role: "assistant", content: "<think>\nSmall talk.\n</think>\n\nFine, thanks." },
      { role: "user", content: "Good." }
    ],
    history: [
      { type: "system", text: "Be kind." },
      { type: "user", text: "Hi" },
      { type: "model", response: [{ type: "segment", segmentType: "thought", text: "They greet me.", ended: true }, "Hello!"] },
      { type: "user", text: "How are you?" },
      { type: "model", response: [{ type: "segment", segmentType: "thought", text: "Small talk.", ended: true }, "Fine, thanks."] },
      { type: "user", text: "Good." },
      { type: "model", response: [] }
    ]
  },
  {
    name: "thinking disabled (enable_thinking false; the wrapper's discouraged thoughts)",
    messages: [{ role: "user", content: "Quick answer please" }],
    inputs: { thinking: false },
    history: [{ type: "user", text: "Quick answer please" }, { type: "model", response: [] }],
    wrapper: new QwenChatWrapper({ thoughts: "discourage" })
  },
  {
    name: "tools offered, with a system prompt",
    messages: [{ role: "system", content: "Use tools." }, { role: "user", content: "Weather in Paris?" }],
    inputs: { tools: [weather] },
    history: [{ type: "system", text: "Use tools." }, { type: "user", text: "Weather in Paris?" }, { type: "model", response: [] }],
    functions
  },
  {
    name: "a tool call with its thought and result in the current turn",
    messages: [
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: "", reasoning: "I should call the tool.", toolCalls: [{ id: "c0", name: "get_weather", arguments: { city: "Paris" } }] },
      { role: "tool", content: "{\"temperature\": 21}", toolCallId: "c0" }
    ],
    inputs: { tools: [weather] },
    history: [
      { type: "user", text: "Weather in Paris?" },
      {
        type: "model",
        response: [
          { type: "segment", segmentType: "thought", text: "I should call the tool.", ended: true },
          // The blank line Qwen writes after `</think>` (node-llama-cpp's thought suffix ends at `</think>`).
          "\n\n",
          { type: "functionCall", name: "get_weather", params: { city: "Paris" }, result: { temperature: 21 } }
        ]
      }
    ],
    functions
  },
  {
    name: "a tool call and its answer in an earlier turn",
    messages: [
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: "", toolCalls: [{ name: "get_weather", arguments: { city: "Paris" } }] },
      { role: "tool", content: "{\"temperature\": 21}" },
      { role: "assistant", content: "It is 21 degrees." },
      { role: "user", content: "Thanks!" }
    ],
    inputs: { tools: [weather] },
    history: [
      { type: "user", text: "Weather in Paris?" },
      {
        type: "model",
        response: [
          { type: "functionCall", name: "get_weather", params: { city: "Paris" }, result: { temperature: 21 } },
          "It is 21 degrees."
        ]
      },
      { type: "user", text: "Thanks!" },
      { type: "model", response: [] }
    ],
    functions
  }
]

describe("Qwen3 chat template through the engine's template path", () => {
  layer(RenderingLive, { timeout: "120 seconds" })((it) => {
    for (const c of cases) {
      it.effect(`${c.name}: Templates.renderText gives node-llama-cpp's text`, () =>
        Effect.gen(function*() {
          const { templated, wrapper: resolved } = yield* Rendering
          const ours = yield* Templates.renderText("generation", templated, c.messages, true, c.inputs)
          const { contextText } = (c.wrapper ?? resolved).generateContextState({
            chatHistory: c.history,
            ...(c.functions === undefined ? {} : { availableFunctions: c.functions })
          })
          assert.strictEqual(ours, contextText.toString())
        }))
    }
  })
})
