/**
 * OpenAI's API with the official `openai` client against a real runtime (qwen-chat: Qwen3's real
 * tokenizer and template, scripted to think, then answer): models, chat whole and streamed with
 * the thought as `reasoning_content`, usage and llama-server timings, a JSON-schema answer, a
 * forced tool call, refusals with their status and OpenAI's error body (the field named), an
 * abort that stops the engine, continuation reuse under a conversation key, and completions.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import OpenAI from "openai"
import { call, refusalOf } from "./openai-support.js"
import { HttpTest } from "./support.js"

const MODEL = "qwen-chat"
const REPLY = "Hello! I am the nativegen seed model."
const THOUGHT = "The user greets me; a short, friendly reply fits."
/** Qwen3's chat format written out: a plain prompt the scripted model answers as it answers a chat. */
const RAW_PROMPT = "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"

const greeting = [{ role: "user" as const, content: "Hi there" }]
const weatherQuestion = [{ role: "user" as const, content: "What is the weather in Paris?" }]

const weatherTool: OpenAI.ChatCompletionTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "The weather of a city",
    parameters: { type: "object", properties: { city: { enum: ["Paris", "Rome"] } }, required: ["city"] }
  }
}
const clockTool: OpenAI.ChatCompletionTool = {
  type: "function",
  function: { name: "get_time", parameters: { type: "object", properties: { zone: { enum: ["UTC", "CET"] } } } }
}

describe("OpenAI API on qwen-chat", () => {
  layer(HttpTest.layer(), { timeout: 180_000, excludeTestServices: true })((it) => {
    it.effect("GET /v1/models lists the generation model with its admitted context; /v1/models/{id} finds it or 404s", () =>
      Effect.gen(function*() {
        const list = yield* call((openai) => openai.models.list())
        assert.deepStrictEqual(list.data.map((m) => [m.id, m.object, m.owned_by]), [[MODEL, "model", "nativegen"]])
        const model = yield* call((openai) => openai.models.retrieve(MODEL))
        const { provider } = yield* HttpTest
        const readiness = yield* provider.readiness
        const generation = readiness.roles.find((r) => r.role === "generation")
        assert.strictEqual((model as unknown as { nativegen: { admitted_context: number } }).nativegen.admitted_context, generation?.admittedContext)
        const missing = yield* refusalOf((openai) => openai.models.retrieve("gpt-4o"))
        assert.strictEqual(missing.status, 404)
        assert.strictEqual(missing.code, "model_not_found")
      }))

    it.effect("a whole chat: the answer as content, the thought as reasoning_content, usage and timings", () =>
      Effect.gen(function*() {
        const completion = yield* call((openai) => openai.chat.completions.create({ model: MODEL, messages: greeting, max_tokens: 64 }))
        const [choice] = completion.choices
        assert.strictEqual(completion.object, "chat.completion")
        assert.strictEqual(completion.model, MODEL)
        assert.include(choice?.message.content ?? "", REPLY)
        const message = choice?.message as unknown as { reasoning_content: string }
        assert.include(message.reasoning_content, THOUGHT)
        assert.strictEqual(choice?.finish_reason, "stop")
        const usage = completion.usage!
        assert.isAbove(usage.prompt_tokens, 0)
        assert.isAbove(usage.completion_tokens, 0)
        assert.strictEqual(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens)
        assert.isAbove(usage.completion_tokens_details?.reasoning_tokens ?? 0, 0)
        const timings = (completion as unknown as { timings: Record<string, number> }).timings
        assert.strictEqual(timings["predicted_n"], usage.completion_tokens)
        assert.strictEqual(timings["cache_n"]! + timings["prompt_n"]!, usage.prompt_tokens)
        assert.strictEqual(timings["cache_n"], usage.prompt_tokens_details?.cached_tokens)
      }))

    it.effect("a streamed chat: deltas with the role, reasoning_content then content, the finish reason, a usage chunk, [DONE]", () =>
      Effect.gen(function*() {
        const chunks = yield* call(async (openai) => {
          const stream = await openai.chat.completions.create({
            model: MODEL,
            messages: greeting,
            max_tokens: 64,
            stream: true,
            stream_options: { include_usage: true }
          })
          const all = []
          for await (const chunk of stream) all.push(chunk)
          return all
        })
        assert.strictEqual(chunks[0]?.choices[0]?.delta.role, "assistant")
        const content = chunks.map((c) => c.choices[0]?.delta.content ?? "").join("")
        const reasoning = chunks.map((c) => (c.choices[0]?.delta as { reasoning_content?: string } | undefined)?.reasoning_content ?? "").join("")
        assert.include(content, REPLY)
        assert.include(reasoning, THOUGHT)
        const finishes = chunks.flatMap((c) => c.choices.flatMap((choice) => (choice.finish_reason === null ? [] : [choice.finish_reason])))
        assert.deepStrictEqual(finishes, ["stop"])
        const last = chunks.at(-1)!
        assert.deepStrictEqual(last.choices, [])
        assert.isAbove(last.usage?.completion_tokens ?? 0, 0)
        assert.strictEqual(chunks.filter((c) => c.usage !== undefined && c.usage !== null).length, 1)
      }))

    it.effect("no max_tokens: the output may fill the admitted context, and the scripted reply ends by itself", () =>
      Effect.gen(function*() {
        const completion = yield* call((openai) => openai.chat.completions.create({ model: MODEL, messages: greeting }))
        assert.include(completion.choices[0]?.message.content ?? "", REPLY)
        assert.strictEqual(completion.choices[0]?.finish_reason, "stop")
      }))

    it.effect("thinking off through chat_template_kwargs.enable_thinking: no reasoning_content, the answer alone", () =>
      Effect.gen(function*() {
        const body = { model: MODEL, messages: greeting, max_tokens: 64, chat_template_kwargs: { enable_thinking: false } }
        const completion = yield* call((openai) => openai.chat.completions.create(body))
        const message = completion.choices[0]?.message as unknown as { content: string; reasoning_content?: string }
        assert.isUndefined(message.reasoning_content)
        assert.include(message.content, REPLY)
        assert.strictEqual(completion.usage?.completion_tokens_details?.reasoning_tokens, 0)
      }))

    it.effect("a json_schema response format: the content parses and matches the schema", () =>
      Effect.gen(function*() {
        const completion = yield* call((openai) =>
          openai.chat.completions.create({
            model: MODEL,
            messages: [{ role: "user", content: "Describe the weather as JSON." }],
            max_tokens: 64,
            response_format: {
              type: "json_schema",
              json_schema: {
                name: "weather",
                schema: {
                  type: "object",
                  properties: {
                    city: { enum: ["Paris", "Rome", "Oslo"] },
                    sunny: { type: "boolean" },
                    note: { type: "string", maxLength: 8 }
                  },
                  required: ["city", "sunny", "note"]
                }
              }
            }
          })
        )
        const parsed = JSON.parse(completion.choices[0]?.message.content ?? "") as { city: string; sunny: unknown; note: string }
        assert.include(["Paris", "Rome", "Oslo"], parsed.city)
        assert.isBoolean(parsed.sunny)
        assert.isAtMost([...parsed.note].length, 8)
        assert.strictEqual(completion.choices[0]?.finish_reason, "stop")
      }))

    it.effect("tool_choice required and a named function: the output is constrained to a call, returned as tool_calls", () =>
      Effect.gen(function*() {
        const tools = [weatherTool, clockTool]
        const required = yield* call((openai) =>
          openai.chat.completions.create({ model: MODEL, messages: weatherQuestion, tools, tool_choice: "required", max_tokens: 64 })
        )
        const [choice] = required.choices
        assert.strictEqual(choice?.finish_reason, "tool_calls")
        assert.isNull(choice?.message.content)
        const [call0] = choice?.message.tool_calls ?? []
        assert(call0?.type === "function")
        assert.include(["get_weather", "get_time"], call0.function.name)
        assert.isObject(JSON.parse(call0.function.arguments))
        // Named, streamed: one tool_calls delta with the whole call, at index 0.
        const chunks = yield* call(async (openai) => {
          const stream = await openai.chat.completions.create({
            model: MODEL,
            messages: weatherQuestion,
            tools,
            tool_choice: { type: "function", function: { name: "get_weather" } },
            max_tokens: 64,
            stream: true
          })
          const all = []
          for await (const chunk of stream) all.push(chunk)
          return all
        })
        const calls = chunks.flatMap((c) => c.choices[0]?.delta.tool_calls ?? [])
        assert.strictEqual(calls.length, 1)
        assert.strictEqual(calls[0]?.index, 0)
        assert.strictEqual(calls[0]?.function?.name, "get_weather")
        const args = JSON.parse(calls[0]?.function?.arguments ?? "") as { city: string }
        assert.include(["Paris", "Rome"], args.city)
        assert.strictEqual(chunks.map((c) => c.choices[0]?.delta.content ?? "").join(""), "")
        assert.include(chunks.map((c) => c.choices[0]?.finish_reason), "tool_calls")
      }))

    it.effect("bad requests are 400 with OpenAI's body naming the field", () =>
      Effect.gen(function*() {
        const n = yield* refusalOf((openai) => openai.chat.completions.create({ model: MODEL, messages: greeting, n: 2 }))
        assert.deepStrictEqual([n.status, n.param, n.type], [400, "n", "invalid_request_error"])
        const part = yield* refusalOf((openai) =>
          openai.chat.completions.create({
            model: MODEL,
            messages: [{ role: "user", content: [{ type: "text", text: "Look" }, { type: "image_url", image_url: { url: "http://x/y.png" } }] }]
          })
        )
        assert.deepStrictEqual([part.status, part.param], [400, "messages[0].content[1].type"])
        assert.include(part.message, "image_url")
        const temperature = yield* refusalOf((openai) => openai.chat.completions.create({ model: MODEL, messages: greeting, temperature: -1 }))
        assert.deepStrictEqual([temperature.status, temperature.param], [400, "temperature"])
        const maxTokens = yield* refusalOf((openai) => openai.chat.completions.create({ model: MODEL, messages: greeting, max_completion_tokens: 0 }))
        assert.deepStrictEqual([maxTokens.status, maxTokens.param], [400, "max_completion_tokens"])
        const shape = yield* refusalOf((openai) =>
          openai.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: 5 as unknown as string }] })
        )
        assert.deepStrictEqual([shape.status, shape.param], [400, "messages[0].content"])
        const top = yield* refusalOf((openai) =>
          openai.chat.completions.create({ model: MODEL, messages: greeting, logprobs: true, top_logprobs: 21 })
        )
        assert.deepStrictEqual([top.status, top.param], [400, "top_logprobs"])
        const lane = yield* refusalOf((openai) =>
          openai.chat.completions.create({ model: MODEL, messages: greeting }, { headers: { "X-Nativegen-Lane": "fast" } })
        )
        assert.deepStrictEqual([lane.status, lane.param], [400, "X-Nativegen-Lane"])
        const utility = yield* call((openai) =>
          openai.chat.completions.create({ model: MODEL, messages: greeting, max_tokens: 64 }, { headers: { "X-Nativegen-Lane": "utility" } })
        )
        assert.include(utility.choices[0]?.message.content ?? "", REPLY)
        const unsupported = yield* refusalOf((openai) =>
          openai.chat.completions.create({
            model: MODEL,
            messages: weatherQuestion,
            tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: { n: { type: "integer", minimum: 1 } } } } }],
            tool_choice: "required"
          })
        )
        assert.deepStrictEqual([unsupported.status, unsupported.param], [400, "tools[0].function.parameters/properties/n/minimum"])
      }))

    it.effect("a prompt over the admitted context is 400 context_length_exceeded with the numbers", () =>
      Effect.gen(function*() {
        const { provider } = yield* HttpTest
        const admitted = (yield* provider.readiness).roles.find((r) => r.role === "generation")?.admittedContext
        assert.isNumber(admitted)
        const long = [{ role: "user" as const, content: "weather ".repeat(admitted!) }]
        const error = yield* refusalOf((openai) => openai.chat.completions.create({ model: MODEL, messages: long, max_tokens: 16 }))
        assert.deepStrictEqual([error.status, error.code, error.param], [400, "context_length_exceeded", "messages"])
        assert.include(error.message, `maximum context length is ${admitted} tokens`)
        assert.match(error.message, /\(\d+ in the messages, 16 in the completion\)/)
        // Streamed, the refusal keeps its status: it comes before any output.
        const streamed = yield* refusalOf((openai) => openai.chat.completions.create({ model: MODEL, messages: long, max_tokens: 16, stream: true }))
        assert.deepStrictEqual([streamed.status, streamed.code], [400, "context_length_exceeded"])
      }))

    it.effect("an unknown model is 404 model_not_found; a missing one is the generation model", () =>
      Effect.gen(function*() {
        const error = yield* refusalOf((openai) => openai.chat.completions.create({ model: "gpt-4o", messages: greeting }))
        assert.deepStrictEqual([error.status, error.code, error.param], [404, "model_not_found", "model"])
        const { baseUrl } = yield* HttpTest
        const response = yield* Effect.promise(() =>
          fetch(`${baseUrl}/v1/chat/completions`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            // No model, and fields nativegen does not read (ignored, as OpenAI-compatible servers do).
            body: JSON.stringify({ messages: greeting, max_tokens: 64, frequency_penalty: 0, metadata: { a: "b" }, x_unknown: [1] })
          })
        )
        assert.strictEqual(response.status, 200)
        const body = (yield* Effect.promise(() => response.json())) as { model: string }
        assert.strictEqual(body.model, MODEL)
      }))

    it.effect("continuation reuse: resending the history under a conversation key continues the checkpoint; without a key it does not", () =>
      Effect.gen(function*() {
        const turn = (key: string | undefined, messages: Array<OpenAI.ChatCompletionMessageParam>) =>
          call((openai) =>
            openai.chat.completions.create(
              { model: MODEL, messages, max_tokens: 64 },
              key === undefined ? {} : { headers: { "X-Nativegen-Conversation": key } }
            )
          )
        const reuseOf = (completion: OpenAI.ChatCompletion) => (completion as unknown as { nativegen: { reuse: string } }).nativegen.reuse
        const twoTurns = (key: string | undefined) =>
          Effect.gen(function*() {
            const first = yield* turn(key, greeting)
            const history: Array<OpenAI.ChatCompletionMessageParam> = [
              ...greeting,
              { role: "assistant", content: first.choices[0]?.message.content ?? "" },
              { role: "user", content: "And again?" }
            ]
            return yield* turn(key, history)
          })
        const keyed = yield* twoTurns("openai-test-conversation")
        assert.strictEqual(reuseOf(keyed), "continuation")
        assert.isAbove(keyed.usage?.prompt_tokens_details?.cached_tokens ?? 0, 0)
        const plain = yield* twoTurns(undefined)
        assert.notStrictEqual(reuseOf(plain), "continuation")
        // OpenAI's own cache key in the body works the same way.
        const first = yield* call((openai) =>
          openai.chat.completions.create({ model: MODEL, messages: greeting, max_tokens: 64, prompt_cache_key: "openai-test-body-key" })
        )
        const second = yield* call((openai) =>
          openai.chat.completions.create({
            model: MODEL,
            max_tokens: 64,
            prompt_cache_key: "openai-test-body-key",
            messages: [...greeting, { role: "assistant", content: first.choices[0]?.message.content ?? "" }, { role: "user", content: "More?" }]
          })
        )
        assert.strictEqual(reuseOf(second), "continuation")
      }))

    it.effect("an abort mid-stream interrupts the generation: the scheduler's running count returns to 0", () =>
      Effect.gen(function*() {
        const { provider } = yield* HttpTest
        // An unbounded string under a grammar: the scripted model fills it until max tokens.
        const stream = yield* call((openai) =>
          openai.chat.completions.create({
            model: MODEL,
            messages: greeting,
            max_tokens: 4000,
            stream: true,
            response_format: { type: "json_schema", json_schema: { name: "long", schema: { type: "object", properties: { text: { type: "string" } } } } }
          })
        )
        const chunks = stream[Symbol.asyncIterator]()
        const texts: Array<string> = []
        while (texts.length < 24) {
          const next = yield* Effect.promise(() => chunks.next())
          assert.isFalse(next.done, "the generation is still running")
          texts.push(next.value.choices[0]?.delta.content ?? "")
        }
        assert.strictEqual((yield* provider.readiness).scheduler.running, 1)
        stream.controller.abort()
        const stopped = yield* provider.readiness.pipe(
          Effect.filterOrFail((r) => r.scheduler.running === 0),
          Effect.retry({ schedule: Schedule.spaced("20 millis") }),
          Effect.timeout("10 seconds")
        )
        assert.strictEqual(stopped.scheduler.running, 0)
        const after = yield* call((openai) => openai.chat.completions.create({ model: MODEL, messages: greeting, max_tokens: 64 }))
        assert.include(after.choices[0]?.message.content ?? "", REPLY)
      }))

    it.effect("logprobs with top_logprobs: natural logs, UTF-8 bytes, the greedy token first among its candidates", () =>
      Effect.gen(function*() {
        const completion = yield* call((openai) =>
          openai.chat.completions.create({ model: MODEL, messages: greeting, max_tokens: 64, logprobs: true, top_logprobs: 3 })
        )
        const [choice] = completion.choices
        const entries = choice?.logprobs?.content ?? []
        assert.isNotEmpty(entries)
        assert.strictEqual(entries.map((e) => e.token).join(""), choice?.message.content)
        for (const entry of entries) {
          assert.isAtMost(entry.logprob, 0)
          assert.deepStrictEqual(entry.bytes, [...Buffer.from(entry.token, "utf8")])
          assert.strictEqual(entry.top_logprobs.length, 3)
          assert.strictEqual(entry.top_logprobs[0]?.token, entry.token)
          assert.closeTo(entry.top_logprobs[0]!.logprob, entry.logprob, 1e-6)
          for (const [i, candidate] of entry.top_logprobs.entries()) {
            if (i > 0) assert.isAtMost(candidate.logprob, entry.top_logprobs[i - 1]!.logprob)
          }
        }
      }))

    it.effect("/v1/completions: a plain prompt, whole and streamed (the same greedy text), with usage", () =>
      Effect.gen(function*() {
        const whole = yield* call((openai) => openai.completions.create({ model: MODEL, prompt: RAW_PROMPT, max_tokens: 64 }))
        assert.strictEqual(whole.object, "text_completion")
        const [choice] = whole.choices
        assert.include(choice?.text ?? "", REPLY)
        assert.strictEqual(choice?.finish_reason, "stop")
        assert.isAbove(whole.usage?.prompt_tokens ?? 0, 0)
        const chunks = yield* call(async (openai) => {
          const stream = await openai.completions.create({
            model: MODEL,
            prompt: [RAW_PROMPT],
            max_tokens: 64,
            stream: true,
            stream_options: { include_usage: true }
          })
          const all = []
          for await (const chunk of stream) all.push(chunk)
          return all
        })
        assert.strictEqual(chunks.map((c) => c.choices[0]?.text ?? "").join(""), choice?.text)
        assert.deepStrictEqual(chunks.flatMap((c) => c.choices.flatMap((x) => (x.finish_reason === null ? [] : [x.finish_reason]))), ["stop"])
        assert.strictEqual(chunks.at(-1)?.usage?.completion_tokens, whole.usage?.completion_tokens)
      }))

    it.effect("/v1/completions logprobs N: each token's text, log probability, top N and offset", () =>
      Effect.gen(function*() {
        const completion = yield* call((openai) => openai.completions.create({ model: MODEL, prompt: RAW_PROMPT, max_tokens: 16, logprobs: 2 }))
        const [choice] = completion.choices
        const logprobs = choice!.logprobs!
        assert.strictEqual(logprobs.tokens!.join(""), choice?.text)
        // Every token of the text; the thought's markers are generated but are not text.
        assert.isAtMost(logprobs.tokens!.length, completion.usage?.completion_tokens ?? 0)
        assert.isAbove(logprobs.tokens!.length, 0)
        for (const [i, token] of logprobs.tokens!.entries()) {
          assert.isAtMost(logprobs.token_logprobs![i]!, 0)
          const top = logprobs.top_logprobs![i]!
          assert.strictEqual(Object.keys(top).length, 2)
          assert.closeTo(top[token]!, logprobs.token_logprobs![i]!, 1e-6)
          assert.strictEqual(logprobs.text_offset![i], logprobs.tokens!.slice(0, i).join("").length)
        }
      }))

    it.effect("/v1/completions refuses what it cannot honour, naming the field", () =>
      Effect.gen(function*() {
        const echo = yield* refusalOf((openai) => openai.completions.create({ model: MODEL, prompt: RAW_PROMPT, echo: true }))
        assert.deepStrictEqual([echo.status, echo.param], [400, "echo"])
        const suffix = yield* refusalOf((openai) => openai.completions.create({ model: MODEL, prompt: RAW_PROMPT, suffix: "}" }))
        assert.deepStrictEqual([suffix.status, suffix.param], [400, "suffix"])
        const logprobs = yield* refusalOf((openai) => openai.completions.create({ model: MODEL, prompt: RAW_PROMPT, logprobs: 21 }))
        assert.deepStrictEqual([logprobs.status, logprobs.param], [400, "logprobs"])
        const two = yield* refusalOf((openai) => openai.completions.create({ model: MODEL, prompt: ["a", "b"] }))
        assert.deepStrictEqual([two.status, two.param], [400, "prompt"])
        const model = yield* refusalOf((openai) => openai.completions.create({ model: "davinci-002", prompt: RAW_PROMPT }))
        assert.deepStrictEqual([model.status, model.code], [404, "model_not_found"])
      }))
  })
})
