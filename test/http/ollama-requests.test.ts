/**
 * The Ollama API's rules that need no engine: how a chat or generate request maps onto the
 * Provider's (options, messages, tool calls, tools, formats, raw prompts) and what it refuses,
 * `keep_alive` durations, the conversation header, model names and the facts read from a GGUF
 * header (every scalar key-value, the parameter count) that `show` and the listings give.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Either from "effect/Either"
import * as fc from "effect/FastCheck"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { writeGguf } from "../../fixtures/gguf.js"
import { constantValues } from "../../fixtures/random.js"
import * as GgufHeader from "../../src/domain/GgufHeader.js"
import * as Models from "../../src/http/ollama/Models.js"
import * as Requests from "../../src/http/ollama/Requests.js"
import type * as Wire from "../../src/http/ollama/Wire.js"

const right = <A, E>(either: Either.Either<A, E>): A => {
  if (Either.isLeft(either)) throw new Error(`expected success, got ${JSON.stringify(either.left)}`)
  return either.right
}

const left = <A, E>(either: Either.Either<A, E>): E => {
  if (Either.isRight(either)) throw new Error(`expected a refusal, got ${JSON.stringify(either.right)}`)
  return either.left
}

const chat = (fields: Partial<Wire.ChatRequest>): Wire.ChatRequest => ({
  model: "m",
  messages: [{ role: "user", content: "hi" }],
  ...fields
})

describe("Ollama's requests", () => {
  it("options map onto sampling, the budget and stop strings, with Ollama's defaults for what is left out", () => {
    const defaults = right(Requests.chatRequest(chat({})))
    assert.deepStrictEqual(defaults.sampling, { temperature: 0.8, topK: 40, topP: 0.9 })
    assert.isUndefined(defaults.maxTokens)
    const given = right(Requests.chatRequest(chat({
      options: { temperature: 0.2, top_k: 5, top_p: 0.5, seed: 7, num_predict: 12, stop: ["\n"], num_ctx: 8192, num_thread: 3 }
    })))
    assert.deepStrictEqual(given.sampling, { temperature: 0.2, topK: 5, topP: 0.5, seed: 7 })
    assert.strictEqual(given.maxTokens, 12)
    assert.deepStrictEqual(given.stop, ["\n"])
    // Ollama's -1 seed is a random one; -1 and -2 num_predict leave the budget to the context.
    const open = right(Requests.chatRequest(chat({ options: { seed: -1, num_predict: -2 } })))
    assert.isUndefined(open.sampling?.seed)
    assert.isUndefined(open.maxTokens)
  })

  it.prop(
    "a sampler nativegen lacks is accepted at its neutral value and refused at any other, naming the option",
    [
      fc.constantFrom(
        ["min_p", 0] as const,
        ["typical_p", 1] as const,
        ["tfs_z", 1] as const,
        ["repeat_penalty", 1] as const,
        ["presence_penalty", 0] as const,
        ["frequency_penalty", 0] as const,
        ["mirostat", 0] as const
      ),
      fc.integer({ min: 1, max: 20 })
    ],
    ([[name, neutral], offset]) => {
      right(Requests.chatRequest(chat({ options: { [name]: neutral } })))
      const refusal = left(Requests.chatRequest(chat({ options: { [name]: neutral + offset } })))
      assert.strictEqual(refusal.status, 400)
      assert.strictEqual(refusal.param, `options.${name}`)
      assert.include(refusal.message, `options.${name} ${neutral + offset} is not supported`)
    }
  )

  it("messages, tool calls, tools and logprobs map onto the Provider's; images and thinking levels are refused", () => {
    const request = right(Requests.chatRequest(chat({
      messages: [
        { role: "user", content: "weather?" },
        {
          role: "assistant",
          content: "",
          thinking: "call it",
          tool_calls: [{ id: "c1", function: { index: 0, name: "get_weather", arguments: { city: "Paris" } } }]
        },
        { role: "tool", content: "sunny", tool_name: "get_weather", tool_call_id: "c1" }
      ],
      tools: [{ type: "function", function: { name: "get_weather", description: "weather" } }],
      format: { type: "object", properties: {} },
      think: false
    })))
    assert.deepStrictEqual(request.messages, [
      { role: "user", content: "weather?" },
      { role: "assistant", content: "", reasoning: "call it", toolCalls: [{ id: "c1", name: "get_weather", arguments: { city: "Paris" } }] },
      { role: "tool", content: "sunny", toolCallId: "c1" }
    ])
    assert.deepStrictEqual(request.tools, [{ name: "get_weather", description: "weather", parameters: { type: "object", properties: {} } }])
    assert.deepStrictEqual(request.responseFormat, { type: "jsonSchema", schema: { type: "object", properties: {} } })
    assert.isFalse(request.thinking)
    assert.deepStrictEqual(right(Requests.chatRequest(chat({ format: "json" }))).responseFormat, { type: "json" })
    assert.isUndefined(right(Requests.chatRequest(chat({ format: "" }))).responseFormat)
    const images = left(Requests.chatRequest(chat({ messages: [{ role: "user", content: "this?", images: ["aGk="] }] })))
    assert.strictEqual(images.param, "messages[0].images")
    assert.strictEqual(left(Requests.chatRequest(chat({ think: "low" }))).param, "think")
    const logprobs = right(Requests.chatRequest(chat({ logprobs: true, top_logprobs: 3 })))
    assert.isTrue(logprobs.probabilities)
    assert.strictEqual(logprobs.topProbabilities, 3)
    // As Ollama: top_logprobs counts only with logprobs, and is 0 to 20.
    assert.isUndefined(right(Requests.chatRequest(chat({ top_logprobs: 3 }))).probabilities)
    assert.strictEqual(left(Requests.chatRequest(chat({ logprobs: true, top_logprobs: 21 }))).param, "top_logprobs")
  })

  it("generate: a user turn after the system prompt, or raw text; suffix, template, context and raw with a system prompt are refused", () => {
    const templated = right(Requests.generateRequest({ model: "m", prompt: "hi", system: "be brief" }))
    assert.deepStrictEqual(templated.messages, [{ role: "system", content: "be brief" }, { role: "user", content: "hi" }])
    assert.isUndefined(templated.prompt)
    const raw = right(Requests.generateRequest({ model: "m", prompt: "<|im_start|>user\nhi", raw: true }))
    assert.deepStrictEqual(raw.messages, [])
    assert.strictEqual(raw.prompt, "<|im_start|>user\nhi")
    for (
      const [fields, param] of [
        [{ suffix: "end" }, "suffix"],
        [{ template: "{{ .Prompt }}" }, "template"],
        [{ context: [1, 2, 3] }, "context"],
        [{ images: ["aGk="] }, "images"],
        [{ raw: true, system: "s" }, "raw"]
      ] as const
    ) {
      assert.strictEqual(left(Requests.generateRequest({ model: "m", prompt: "p", ...fields })).param, param)
    }
  })

  it.prop(
    "keep_alive: seconds, or a Go duration whose parts add up; anything else is refused",
    [fc.array(fc.tuple(fc.integer({ min: 0, max: 999 }), fc.constantFrom(["h", 3600e3] as const, ["m", 60e3] as const, ["s", 1e3] as const, ["ms", 1] as const)), { minLength: 1, maxLength: 4 })],
    ([parts]) => {
      const text = parts.map(([amount, [unit]]) => `${amount}${unit}`).join("")
      const millis = parts.reduce((total, [amount, [, scale]]) => total + amount * scale, 0)
      assert.strictEqual(right(Requests.keepAliveMillis(text)), millis)
      assert.strictEqual(right(Requests.keepAliveMillis(`-${text}`)), -millis)
      assert.strictEqual(left(Requests.keepAliveMillis(`${text}x`)).param, "keep_alive")
    }
  )

  it("keep_alive: numbers are seconds, \"0\" is zero; only a load-only request with 0 (an unload) is refused", () => {
    assert.strictEqual(right(Requests.keepAliveMillis(300)), 300_000)
    assert.strictEqual(right(Requests.keepAliveMillis("0")), 0)
    assert.strictEqual(left(Requests.keepAliveMillis("5 minutes")).param, "keep_alive")
    assert.isTrue(Either.isRight(Requests.checkLoadOnly("5m")))
    assert.isTrue(Either.isRight(Requests.checkLoadOnly(undefined)))
    assert.strictEqual(left(Requests.checkLoadOnly(0)).param, "keep_alive")
    assert.strictEqual(left(Requests.checkLoadOnly("0s")).param, "keep_alive")
  })

  it("the conversation header: 1 to 200 characters", () => {
    assert.isUndefined(right(Requests.conversationKeyOf({})))
    assert.strictEqual(right(Requests.conversationKeyOf({ "x-nativegen-conversation": "chat-1" })), "chat-1")
    assert.strictEqual(left(Requests.conversationKeyOf({ "x-nativegen-conversation": "" })).param, "x-nativegen-conversation")
    assert.strictEqual(left(Requests.conversationKeyOf({ "x-nativegen-conversation": "k".repeat(201) })).status, 400)
  })

  it("the Provider's field names as Ollama's clients write them", () => {
    assert.strictEqual(Requests.ollamaField("maxTokens"), "options.num_predict")
    assert.strictEqual(Requests.ollamaField("sampling.topP"), "options.top_p")
    assert.strictEqual(Requests.ollamaField("responseFormat.schema/properties/code/pattern"), "format/properties/code/pattern")
    assert.strictEqual(Requests.ollamaField("messages[2].toolCalls"), "messages[2].tool_calls")
    assert.strictEqual(Requests.ollamaField("topProbabilities"), "top_logprobs")
  })
})

describe("Ollama's model names and facts", () => {
  const model = (name: string): Models.LoadedModel => ({
    role: "generation",
    name: Models.withTag(name),
    modelPath: "/m.gguf",
    manifestDigest: null,
    admittedContext: 4096
  })

  it.prop(
    "a model is named with or without its `latest` tag, in any case; another tag is another model",
    [fc.stringMatching(/^[a-z][a-z0-9._-]{0,15}(\/[a-z][a-z0-9._-]{0,15})?$/)],
    ([name]) => {
      const loaded = model(name)
      assert.strictEqual(loaded.name, `${name}:latest`)
      assert.isTrue(Models.names(name, loaded))
      assert.isTrue(Models.names(`${name}:latest`, loaded))
      assert.isTrue(Models.names(name.toUpperCase(), loaded))
      assert.isFalse(Models.names(`${name}:8b`, loaded))
      assert.strictEqual(Models.withTag(loaded.name), loaded.name)
    }
  )

  it("parameter sizes as Ollama writes them, and what a template supports", () => {
    assert.deepStrictEqual(
      [8_030_261_248, 7_615_616_512, 3_000_000_000, 19_474_560, 596_049_920, 125_000, 54].map(Models.humanNumber),
      ["8.0B", "7.6B", "3B", "19.47M", "596.05M", "125K", "54"]
    )
    assert.deepStrictEqual(Models.templateCapabilitiesOf("{% if tools %}{{ tools }}{% endif %}<think>"), ["tools", "thinking"])
    assert.deepStrictEqual(Models.templateCapabilitiesOf("{% if enable_thinking is defined %}{% endif %}"), ["thinking"])
    assert.deepStrictEqual(Models.templateCapabilitiesOf("{{ messages }}"), [])
    assert.deepStrictEqual(Models.capabilitiesOf({ ...model("d"), role: "decision" }, {
      size: 1,
      modifiedAt: new Date(0),
      details: { parent_model: "", format: "gguf", family: "f", families: ["f"], parameter_size: "1", quantization_level: "F32" },
      modelInfo: {},
      template: "",
      license: undefined,
      templateCapabilities: ["tools"]
    }), [])
  })

  it("the GGUF header gives every scalar key-value (arrays left out) and the tensors' elements as the parameter count", () => {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "ollama-header-"))
    try {
      const path = Path.join(dir, "m.gguf")
      writeGguf(
        path,
        [
          ["general.architecture", { type: "string", value: "llama" }],
          ["general.file_type", { type: "u32", value: 7 }],
          ["llama.context_length", { type: "u32", value: 2048 }],
          ["llama.rope.dimension_count", { type: "i32", value: -3 }],
          ["llama.attention.layer_norm_rms_epsilon", { type: "f32", value: 0.5 }],
          ["tokenizer.ggml.add_bos_token", { type: "bool", value: true }],
          ["tokenizer.ggml.tokens", { type: "string[]", value: ["a", "b", "c"] }],
          ["tokenizer.chat_template", { type: "string", value: "{{ messages }}" }]
        ],
        [
          { name: "a.weight", dims: [8, 2], type: "f32", data: constantValues(1) },
          { name: "b.weight", dims: [4], type: "f16", data: constantValues(0.5) }
        ]
      )
      const bytes = Fs.readFileSync(path)
      const header = right(GgufHeader.read((position, length) => bytes.subarray(position, position + length), bytes.length, 64))
      assert.deepStrictEqual(Object.fromEntries(header.metadata), {
        "general.architecture": "llama",
        "general.file_type": 7,
        "llama.context_length": 2048,
        "llama.rope.dimension_count": -3,
        "llama.attention.layer_norm_rms_epsilon": 0.5,
        "tokenizer.ggml.add_bos_token": true,
        "tokenizer.chat_template": "{{ messages }}"
      })
      assert.strictEqual(header.parameterCount, 8 * 2 + 4)
    } finally {
      Fs.rmSync(dir, { recursive: true, force: true })
    }
  })
})
