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
import { HttpTest } from "./support.js"

const MODEL = "qwen-chat"
const REPLY = "Hello! I am the nativegen seed model."
const THOUGHT = "The user greets me; a short, friendly reply fits."

const client = Effect.map(HttpTest, ({ baseUrl }) => new OpenAI({ baseURL: `${baseUrl}/v1`, apiKey: "unused", maxRetries: 0 }))

/** The client's APIError for a request the server refuses. */
const refusalOf = <A>(request: (client: OpenAI) => Promise<A>) =>
  Effect.flatMap(client, (openai) =>
    Effect.flip(Effect.tryPromise({
      try: () => request(openai),
      catch: (error) => {
        assert(error instanceof OpenAI.APIError, `an API error, not ${String(error)}`)
        return error
      }
    })))

const call = <A>(request: (client: OpenAI) => Promise<A>) => Effect.flatMap(client, (openai) => Effect.promise(() => request(openai)))

const greeting = [{ role: "user" as const, content: "Hi there" }]

describe("OpenAI API: chat completions on qwen-chat", () => {
  layer(HttpTest.layer(), { timeout: 180_000 })((it) => {
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
  })
})
