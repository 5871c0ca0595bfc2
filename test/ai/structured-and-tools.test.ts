/**
 * @effect/ai's structured output and toolkits over nativegen on the real engine: `generateObject`
 * on a random-weight model (tiny) decodes against its schema, because the schema goes to the
 * engine as a JSON-schema grammar; a toolkit whose tool the scripted qwen-tool model calls is
 * resolved by @effect/ai (the handler runs, finish reason `tool-calls`), and a Chat turn after the
 * tool result continues the conversation from its cache with the call and the result rendered
 * through Qwen3's template.
 */
import * as Chat from "@effect/ai/Chat"
import * as LanguageModel from "@effect/ai/LanguageModel"
import * as Tool from "@effect/ai/Tool"
import * as Toolkit from "@effect/ai/Toolkit"
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { ensureModel } from "../../fixtures/models.js"
import { NativegenLanguageModel } from "../../src/ai/index.js"
import { runtimeLayer } from "../support/engine.js"

const Person = Schema.Struct({
  name: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(12)),
  mood: Schema.Literal("calm", "busy", "away"),
  awake: Schema.Boolean,
  tags: Schema.Array(Schema.String.pipe(Schema.maxLength(6))).pipe(Schema.maxItems(3))
})

const GetWeather = Tool.make("get_weather", {
  description: "The weather of a city",
  parameters: { city: Schema.String },
  success: Schema.String
})
const Weather = Toolkit.make(GetWeather)
const handlers = Weather.toLayer({ get_weather: ({ city }) => Effect.succeed(`Sunny in ${city}`) })

describe("@effect/ai structured output and tools over nativegen", () => {
  layer(NativegenLanguageModel.layer({ maxTokens: 400 }).pipe(Layer.provideMerge(runtimeLayer())), {
    timeout: 180_000,
    excludeTestServices: true
  })("tiny (random weights)", (it) => {
    it.effect("generateObject: the grammar makes a random model's answer decode against the schema", () =>
      Effect.gen(function*() {
        for (const content of ["Describe a person.", "Who is on watch tonight?", "Name a sailor."]) {
          const response = yield* LanguageModel.generateObject({ prompt: content, schema: Person })
          assert.deepStrictEqual(Schema.decodeUnknownSync(Person)(JSON.parse(response.text)), response.value)
          assert.strictEqual(response.finishReason, "stop")
        }
      }))
  })

  layer(Layer.mergeAll(NativegenLanguageModel.layer(), handlers).pipe(Layer.provideMerge(runtimeLayer({}, { generation: ensureModel("qwen-tool") }))), {
    timeout: 180_000,
    excludeTestServices: true
  })("qwen-tool", (it) => {
    it.effect("a toolkit's tool is called by the model and resolved by @effect/ai; the next Chat turn continues", () =>
      Effect.gen(function*() {
        const chat = yield* Chat.empty
        const inConversation = NativegenLanguageModel.withConfigOverride({ conversation: "ai-tools" })
        const first = yield* chat.generateText({ prompt: "What is the weather in Paris?", toolkit: Weather }).pipe(inConversation)
        assert.strictEqual(first.finishReason, "tool-calls")
        assert.deepStrictEqual(first.toolCalls.map((c) => [c.name, c.params]), [["get_weather", { city: "Paris" }]])
        assert.deepStrictEqual(first.toolResults.map((r) => [r.name, r.result, r.id]), [["get_weather", "Sunny in Paris", first.toolCalls[0]!.id]])
        assert.include(first.reasoningText ?? "", "weather in Paris")

        // The history now ends with the call and its result; the next turn renders both and
        // continues from what the conversation's sequence holds.
        const history = yield* chat.history
        assert.deepStrictEqual(history.content.map((m) => m.role), ["user", "assistant", "tool"])
        const second = yield* chat.generateText({ prompt: [], toolkit: Weather }).pipe(inConversation)
        const finish = second.content.find((part) => part.type === "finish")
        assert(finish?.type === "finish")
        assert.strictEqual(finish.metadata.nativegen?.reuse, "continuation")
        assert.isAbove(second.usage.cachedInputTokens ?? 0, 0)
      }))

    it.effect("a tool choice that requires a call is refused (nativegen does not force one)", () =>
      Effect.gen(function*() {
        const error = yield* Effect.flip(LanguageModel.generateText({ prompt: "Weather?", toolkit: Weather, toolChoice: "required" }))
        assert.strictEqual(error._tag, "MalformedInput")
        assert.include(error.message, "does not force a tool call")
      }))
  })
})
