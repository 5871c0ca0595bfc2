/**
 * Ollama's API (`/api`) through Ollama's own JS client (the `ollama` package) on a real runtime:
 * qwen-chat (Qwen3's tokenizer and template, a scripted reply that thinks first) for generation
 * and qwen-decision for decisions. Chat streamed and whole (thought and answer apart, the final
 * statistics equal to what the Provider reports), logprobs, generate through the template and raw, a JSON
 * schema format, the listings (tags, ps, show, version), a conversation key's continuation, an
 * abort that interrupts the generation in the engine, and the refusals in Ollama's shape.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Queue from "effect/Queue"
import * as Stream from "effect/Stream"
import * as Fs from "node:fs"
import type { ChatResponse, GenerateResponse } from "ollama"
import { ensureModel, pinnedDigests } from "../../fixtures/models.js"
import { qwen3Specs } from "../../fixtures/qwen3-models.js"
import type { GenerateChunk, GenerateRequest } from "../../src/domain/Inference.js"
import { packageVersion } from "../../src/internal/PackageFiles.js"
import { forgetGenerations, idle, OllamaTest } from "./ollama-support.js"

const greeting = [{ role: "user", content: "Hello there!" }]

/** The error a client call rejects with, and its HTTP status (Ollama's ResponseError carries `status_code`). */
const rejection = (call: () => Promise<unknown>) =>
  Effect.map(Effect.flip(Effect.tryPromise(call)), (failure) => {
    const error = failure.error
    const status = typeof error === "object" && error !== null && "status_code" in error && typeof error.status_code === "number"
      ? error.status_code
      : undefined
    return { status, message: error instanceof Error ? error.message : String(error) }
  })

/** A field Ollama's client types do not declare (the response carries it). */
const extra = (value: object, field: string): unknown => new Map(Object.entries(value)).get(field)

/** Every part of a streamed reply. */
const collect = <A>(parts: AsyncIterable<A>) =>
  Effect.promise(async () => {
    const all: Array<A> = []
    for await (const part of parts) all.push(part)
    return all
  })

/** What the Provider itself gives for a request: its texts per channel and its Done chunk. */
const embedded = (request: GenerateRequest) =>
  Effect.gen(function*() {
    const { provider } = yield* OllamaTest
    const chunks = Chunk.toReadonlyArray(yield* Stream.runCollect(provider.generate(request)))
    const done = chunks.find((c): c is Extract<GenerateChunk, { _tag: "Done" }> => c._tag === "Done")
    assert(done !== undefined, "no Done chunk")
    const text = (channel: "thought" | "answer") =>
      chunks.flatMap((c) => (c._tag === "Text" && c.channel === channel ? [c.text] : [])).join("")
    return { thought: text("thought"), answer: text("answer"), done }
  })

/** The final statistics add up: load + prompt evaluation + evaluation is the total (to rounding). */
const assertStatistics = (final: ChatResponse | GenerateResponse) => {
  assert.isTrue(final.done)
  for (const field of ["total_duration", "load_duration", "prompt_eval_duration", "eval_duration"] as const) {
    assert.isTrue(Number.isInteger(final[field]) && final[field] >= 0, `${field} ${final[field]}`)
  }
  assert.isAbove(final.total_duration, 0)
  assert.approximately(final.load_duration + final.prompt_eval_duration + final.eval_duration, final.total_duration, 3)
}

describe("Ollama's API", () => {
  layer(OllamaTest.layer({ generation: "qwen-chat", decision: "qwen-decision" }), { timeout: 180_000, excludeTestServices: true })(
    "qwen-chat through the ollama client",
    (it) => {
      it.effect("chat streams the thought and the answer apart; the last line's statistics are the Provider's", () =>
        Effect.gen(function*() {
          const { client } = yield* OllamaTest
          const parts = yield* collect(yield* Effect.promise(() =>
            client.chat({ model: "qwen-chat", messages: greeting, stream: true, options: { temperature: 0, num_predict: 64 } })
          ))
          const reference = yield* embedded({ messages: [{ role: "user", content: "Hello there!" }], maxTokens: 64, sampling: { temperature: 0 } })
          const final = parts.at(-1)!
          const streamed = parts.slice(0, -1)
          assert.isAbove(streamed.length, 2, "streamed in parts")
          assert.isTrue(streamed.every((p) => !p.done && p.model === "qwen-chat" && p.message.role === "assistant"))
          // A part carries thought or answer, never both.
          assert.isTrue(streamed.every((p) => p.message.thinking === undefined || p.message.content === ""))
          const thinking = streamed.map((p) => p.message.thinking ?? "").join("")
          const content = streamed.map((p) => p.message.content).join("")
          assert.strictEqual(thinking, reference.thought)
          assert.strictEqual(content, reference.answer)
          assert.include(thinking, "The user greets me")
          assert.include(content, "Hello! I am the nativegen seed model.")
          assert.strictEqual(final.done_reason, "stop")
          assert.strictEqual(final.eval_count, reference.done.usage.generatedTokens)
          assert.strictEqual(final.prompt_eval_count, reference.done.usage.promptTokens)
          assertStatistics(final)
          assert.isTrue(new Date(final.created_at).getTime() > Date.now() - 60_000, String(final.created_at))
        }))

      it.effect("as curl sees it: streamed by default, one JSON object per line (application/x-ndjson)", () =>
        Effect.gen(function*() {
          const { baseUrl } = yield* OllamaTest
          const response = yield* Effect.promise(() =>
            fetch(`${baseUrl}/api/chat`, {
              method: "POST",
              body: JSON.stringify({ model: "qwen-chat", messages: greeting, options: { temperature: 0, num_predict: 64 } })
            })
          )
          assert.strictEqual(response.status, 200)
          assert.strictEqual(response.headers.get("content-type"), "application/x-ndjson")
          const text = yield* Effect.promise(() => response.text())
          assert.isTrue(text.endsWith("\n"))
          const lines: Array<unknown> = text.trimEnd().split("\n").map((line) => JSON.parse(line))
          assert.isAbove(lines.length, 2)
          const last = lines.at(-1)
          assert(typeof last === "object" && last !== null, text)
          assert.strictEqual(extra(last, "done"), true)
          assert.strictEqual(extra(last, "done_reason"), "stop")
          assert.isTrue(lines.slice(0, -1).every((line) => typeof line === "object" && line !== null && extra(line, "done") === false))
          const empty = yield* Effect.promise(() =>
            fetch(`${baseUrl}/api/chat`, { method: "POST", body: JSON.stringify({ model: "", messages: greeting }) })
          )
          assert.strictEqual(empty.status, 400)
          assert.deepStrictEqual(yield* Effect.promise(() => empty.json()), { error: "model is required" })
        }))

      it.effect("chat without streaming: one reply; think false asks the template to skip the thought", () =>
        Effect.gen(function*() {
          const { client } = yield* OllamaTest
          const thoughtful = yield* Effect.promise(() => client.chat({ model: "qwen-chat:latest", messages: greeting, options: { num_predict: 64 } }))
          assert.include(thoughtful.message.thinking ?? "", "The user greets me")
          assert.include(thoughtful.message.content, "Hello! I am the nativegen seed model.")
          assert.strictEqual(thoughtful.model, "qwen-chat:latest")
          assertStatistics(thoughtful)
          const direct = yield* Effect.promise(() => client.chat({ model: "qwen-chat", messages: greeting, think: false, options: { num_predict: 64 } }))
          assert.isUndefined(direct.message.thinking)
          assert.strictEqual(direct.message.content, "Hello! I am the nativegen seed model.")
          assert.isBelow(direct.eval_count, thoughtful.eval_count)
        }))

      it.effect("num_predict cuts the reply: done_reason length, eval_count the limit", () =>
        Effect.gen(function*() {
          const { client } = yield* OllamaTest
          const cut = yield* Effect.promise(() => client.chat({ model: "qwen-chat", messages: greeting, options: { num_predict: 5 } }))
          assert.strictEqual(cut.done_reason, "length")
          assert.strictEqual(cut.eval_count, 5)
        }))

      it.effect("without num_predict the reply runs to its end (the budget is what the context leaves)", () =>
        Effect.gen(function*() {
          const { client } = yield* OllamaTest
          const whole = yield* Effect.promise(() => client.chat({ model: "qwen-chat", messages: greeting }))
          assert.strictEqual(whole.done_reason, "stop")
          assert.include(whole.message.content, "Hello! I am the nativegen seed model.")
        }))

      it.effect("logprobs: each token's log probability and the most probable tokens at its step", () =>
        Effect.gen(function*() {
          const { client } = yield* OllamaTest
          const reply = yield* Effect.promise(() =>
            client.chat({ model: "qwen-chat", messages: greeting, think: false, logprobs: true, top_logprobs: 3, options: { temperature: 0, num_predict: 6 } })
          )
          const logprobs = reply.logprobs ?? []
          assert.isAbove(logprobs.length, 0)
          assert.strictEqual(logprobs.map((l) => l.token).join(""), reply.message.content)
          for (const { logprob, token, top_logprobs: top = [] } of logprobs) {
            assert.isAtMost(logprob, 0)
            assert.strictEqual(top.length, 3)
            assert.deepStrictEqual(top.map((t) => t.logprob), [...top.map((t) => t.logprob)].sort((a, b) => b - a))
            // Greedy: the token taken is the most probable one.
            assert.strictEqual(top[0]?.token, token)
            assert.approximately(top[0]?.logprob ?? Number.NaN, logprob, 1e-6)
          }
          const streamed = yield* collect(yield* Effect.promise(() =>
            client.generate({ model: "qwen-chat", prompt: "Hello there!", think: false, stream: true, logprobs: true, options: { temperature: 0, num_predict: 6 } })
          ))
          const tokens = streamed.flatMap((p) => p.logprobs ?? [])
          assert.strictEqual(tokens.map((l) => l.token).join(""), streamed.map((p) => p.response).join(""))
          assert.isTrue(tokens.every((l) => l.top_logprobs === undefined))
        }))

      it.effect("generate: the prompt as a user turn (with a system prompt), streamed and whole", () =>
        Effect.gen(function*() {
          const { client } = yield* OllamaTest
          const reference = yield* embedded({
            messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Hello there!" }],
            maxTokens: 64,
            sampling: { temperature: 0 }
          })
          const whole = yield* Effect.promise(() =>
            client.generate({ model: "qwen-chat", system: "Be brief.", prompt: "Hello there!", options: { temperature: 0, num_predict: 64 } })
          )
          assert.strictEqual(whole.response, reference.answer)
          assert.strictEqual(whole.thinking, reference.thought)
          assert.strictEqual(whole.prompt_eval_count, reference.done.usage.promptTokens)
          assert.strictEqual(whole.eval_count, reference.done.usage.generatedTokens)
          assertStatistics(whole)
          const parts = yield* collect(yield* Effect.promise(() =>
            client.generate({ model: "qwen-chat", system: "Be brief.", prompt: "Hello there!", stream: true, options: { temperature: 0, num_predict: 64 } })
          ))
          assert.strictEqual(parts.map((p) => p.response).join(""), reference.answer)
          assert.strictEqual(parts.at(-1)?.done_reason, "stop")
        }))

      it.effect("generate raw: the prompt as plain text, without the template", () =>
        Effect.gen(function*() {
          const { client } = yield* OllamaTest
          const prompt = "<|im_start|>user\nHello there!<|im_end|>\n<|im_start|>assistant\n"
          const raw = yield* Effect.promise(() => client.generate({ model: "qwen-chat", prompt, raw: true, options: { temperature: 0, num_predict: 64 } }))
          const templated = yield* embedded({ messages: [{ role: "user", content: "Hello there!" }], maxTokens: 64, sampling: { temperature: 0 } })
          // The same tokens as the template renders: the same prompt count and reply.
          assert.strictEqual(raw.prompt_eval_count, templated.done.usage.promptTokens)
          assert.strictEqual(raw.response, templated.answer)
        }))

      it.effect("an empty prompt or no messages loads the model: done_reason load", () =>
        Effect.gen(function*() {
          const { client } = yield* OllamaTest
          const loaded = yield* Effect.promise(() => client.generate({ model: "qwen-chat", prompt: "" }))
          assert.strictEqual(loaded.done_reason, "load")
          assert.isTrue(loaded.done)
          const chat = yield* Effect.promise(() => client.chat({ model: "qwen-chat", messages: [] }))
          assert.strictEqual(chat.done_reason, "load")
          const unload = yield* rejection(() => client.generate({ model: "qwen-chat", prompt: "", keep_alive: 0 }))
          assert.strictEqual(unload.status, 400)
          assert.include(unload.message, "keep_alive 0 cannot unload")
        }))

      it.effect("a JSON schema format: the reply parses and has the schema's fields", () =>
        Effect.gen(function*() {
          const { client } = yield* OllamaTest
          const format = {
            type: "object",
            properties: { name: { type: "string", maxLength: 12 }, age: { type: "integer" } },
            required: ["name", "age"]
          }
          const reply = yield* Effect.promise(() =>
            client.chat({ model: "qwen-chat", messages: [{ role: "user", content: "Describe someone as JSON." }], format, options: { temperature: 0, num_predict: 400 } })
          )
          assert.strictEqual(reply.done_reason, "stop")
          assert.isUndefined(reply.message.thinking)
          const value: unknown = JSON.parse(reply.message.content)
          assert(typeof value === "object" && value !== null && "name" in value && "age" in value, reply.message.content)
          assert.strictEqual(typeof value.name, "string")
          assert.isTrue(Number.isInteger(value.age))
          const generated = yield* Effect.promise(() =>
            client.generate({ model: "qwen-chat", prompt: "Describe someone as JSON.", format, options: { temperature: 0, num_predict: 400 } })
          )
          assert.deepStrictEqual(Object.keys(JSON.parse(generated.response ?? "")).sort(), ["age", "name"])
          const json = yield* Effect.promise(() =>
            client.generate({ model: "qwen-chat", prompt: "Describe someone as JSON.", format: "json", options: { temperature: 0, num_predict: 8 } })
          )
          assert.isTrue(json.response?.startsWith("{"), json.response)
        }))

      it.effect("tags and ps list both resident models with their file's size, digest and GGUF details", () =>
        Effect.gen(function*() {
          const { client, provider } = yield* OllamaTest
          const { models } = yield* Effect.promise(() => client.list())
          assert.deepStrictEqual(models.map((m) => m.name), ["qwen-chat:latest", "qwen-decision:latest"])
          const chat = models[0]!
          assert.strictEqual(chat.model, "qwen-chat:latest")
          assert.strictEqual(chat.size, Fs.statSync(ensureModel("qwen-chat")).size)
          assert.strictEqual(`sha256:${chat.digest}`, pinnedDigests["qwen-chat"])
          assert.deepStrictEqual(chat.details, {
            parent_model: "",
            format: "gguf",
            family: "qwen3",
            families: ["qwen3"],
            parameter_size: chat.details.parameter_size,
            quantization_level: "Q4_0"
          })
          assert.match(chat.details.parameter_size, /^\d+(\.\d+)?M$/)
          assert.isFalse(Number.isNaN(new Date(chat.modified_at).getTime()))
          const running = yield* Effect.promise(() => client.ps())
          const readiness = yield* provider.readiness
          assert.deepStrictEqual(running.models.map((m) => m.name), ["qwen-chat:latest", "qwen-decision:latest"])
          for (const [i, model] of running.models.entries()) {
            assert.strictEqual(model.size, models[i]!.size)
            assert.strictEqual(model.digest, models[i]!.digest)
            assert.strictEqual(model.size_vram, 0, "a CPU engine holds nothing in VRAM")
            assert.isAbove(new Date(model.expires_at).getTime(), Date.now() + 100 * 365 * 24 * 3600_000, "kept loaded")
          }
          assert.strictEqual(extra(running.models[0]!, "context_length"), readiness.roles.find((r) => r.role === "generation")?.admittedContext)
        }))

      it.effect("show: details, the header's model_info, the chat template and what it supports", () =>
        Effect.gen(function*() {
          const { client } = yield* OllamaTest
          const shown = yield* Effect.promise(() => client.show({ model: "qwen-chat" }))
          const spec = qwen3Specs["qwen-chat"]
          const info = new Map(Object.entries(shown.model_info))
          assert.strictEqual(info.get("general.architecture"), "qwen3")
          assert.strictEqual(info.get("qwen3.context_length"), spec.contextLength)
          assert.strictEqual(info.get("qwen3.embedding_length"), spec.embedding)
          assert.strictEqual(info.get("qwen3.block_count"), spec.layers)
          assert.approximately(Number(info.get("qwen3.attention.layer_norm_rms_epsilon")), 1e-6, 1e-12)
          assert.isFalse(info.has("tokenizer.chat_template"))
          assert.include(shown.template, "<|im_start|>")
          assert.deepStrictEqual([...shown.capabilities].sort(), ["completion", "thinking", "tools"])
          assert.strictEqual(shown.details.quantization_level, "Q4_0")
          const decision = yield* Effect.promise(() => client.show({ model: "qwen-decision:latest" }))
          assert.deepStrictEqual(decision.capabilities, [])
        }))

      it.effect("version is the package's", () =>
        Effect.gen(function*() {
          const { client } = yield* OllamaTest
          assert.deepStrictEqual(yield* Effect.promise(() => client.version()), { version: packageVersion() })
        }))

      it.effect("a conversation key: the next turn of a resent history continues the cached one", () =>
        Effect.gen(function*() {
          const { baseUrl } = yield* OllamaTest
          const { Ollama } = yield* Effect.promise(() => import("ollama"))
          const keyed = new Ollama({ host: baseUrl, headers: { "X-Nativegen-Conversation": "ollama-test-1" } })
          const first = yield* Effect.promise(() => keyed.chat({ model: "qwen-chat", messages: greeting, think: false, options: { num_predict: 64 } }))
          const history = [...greeting, { role: "assistant", content: first.message.content }, { role: "user", content: "And again?" }]
          const second = yield* Effect.promise(() => keyed.chat({ model: "qwen-chat", messages: history, think: false, options: { num_predict: 64 } }))
          const reuse = extra(second, "nativegen")
          assert(typeof reuse === "object" && reuse !== null, JSON.stringify(second))
          assert.strictEqual(extra(reuse, "reuse"), "continuation")
          assert.isAbove(Number(extra(reuse, "reused_tokens")), first.prompt_eval_count)
          const long = yield* rejection(() =>
            new Ollama({ host: baseUrl, headers: { "X-Nativegen-Conversation": "k".repeat(201) } }).chat({ model: "qwen-chat", messages: greeting })
          )
          assert.strictEqual(long.status, 400)
          assert.include(long.message, "x-nativegen-conversation")
        }))

      it.effect("an aborted stream interrupts its generation in the engine; the scheduler runs nothing after", () =>
        Effect.gen(function*() {
          const { client, generations, provider } = yield* OllamaTest
          yield* forgetGenerations
          // Near-uniform sampling over Qwen3's vocabulary: it runs on until cut (see test/rpc/e2e.test.ts).
          const stream = yield* Effect.promise(() =>
            client.chat({
              model: "qwen-chat",
              messages: [{ role: "user", content: "Write a very long essay about the ocean." }],
              stream: true,
              options: { temperature: 100, seed: 1, num_predict: 3000 }
            })
          )
          const ended = yield* Queue.take(generations)
          const iterator = stream[Symbol.asyncIterator]()
          const first = yield* Effect.promise(() => iterator.next())
          assert.isFalse(first.done)
          stream.abort()
          const ending = yield* Deferred.await(ended)
          assert.isFalse(ending.whole, "the generation ran to its end")
          yield* idle(provider)
          // The engine serves the next request.
          const next = yield* Effect.promise(() => client.chat({ model: "qwen-chat", messages: greeting, think: false, options: { num_predict: 64 } }))
          assert.strictEqual(next.done_reason, "stop")
        }))

      it.effect("refusals in Ollama's shape: unknown model 404, bad input 400 naming the field, unsupported endpoints 501", () =>
        Effect.gen(function*() {
          const { baseUrl, client } = yield* OllamaTest
          const unknown = yield* rejection(() => client.chat({ model: "llama3.2", messages: greeting }))
          assert.deepStrictEqual(unknown, { status: 404, message: "model 'llama3.2' not found" })
          const unknownShow = yield* rejection(() => client.show({ model: "llama3.2:8b" }))
          assert.strictEqual(unknownShow.status, 404)
          const decision = yield* rejection(() => client.chat({ model: "qwen-decision", messages: greeting }))
          assert.deepStrictEqual(decision, { status: 400, message: "\"qwen-decision\" does not support chat" })
          const penalty = yield* rejection(() => client.chat({ model: "qwen-chat", messages: greeting, options: { repeat_penalty: 1.3 } }))
          assert.strictEqual(penalty.status, 400)
          assert.include(penalty.message, "options.repeat_penalty 1.3 is not supported")
          const temperature = yield* rejection(() => client.chat({ model: "qwen-chat", messages: greeting, options: { temperature: -1 } }))
          assert.strictEqual(temperature.status, 400)
          assert.include(temperature.message, "options.temperature")
          const level = yield* rejection(() => client.chat({ model: "qwen-chat", messages: greeting, think: "high" }))
          assert.strictEqual(level.status, 400)
          assert.include(level.message, "think \"high\" is not supported")
          const suffix = yield* rejection(() => client.generate({ model: "qwen-chat", prompt: "def f():", suffix: "return 1" }))
          assert.strictEqual(suffix.status, 400)
          assert.include(suffix.message, "suffix is not supported")
          const images = yield* rejection(() => client.generate({ model: "qwen-chat", prompt: "What is this?", images: ["aGVsbG8="] }))
          assert.strictEqual(images.status, 400)
          const overContext = yield* rejection(() =>
            client.chat({ model: "qwen-chat", messages: [{ role: "user", content: "word ".repeat(5000) }] })
          )
          assert.strictEqual(overContext.status, 400)
          assert.match(overContext.message, /prompt tokens \+ 1 output tokens exceed the admitted generation context of \d+ tokens/)
          const pull = yield* rejection(() => client.pull({ model: "llama3.2" }))
          assert.strictEqual(pull.status, 501)
          assert.include(pull.message, "nativegen store import")
          const embed = yield* rejection(() => client.embed({ model: "qwen-chat", input: "hello" }))
          assert.strictEqual(embed.status, 501)
          assert.include(embed.message, "embeddings are not supported")
          // A body that is not JSON, and a field of the wrong type, with curl's content type.
          const notJson = yield* Effect.promise(() => fetch(`${baseUrl}/api/chat`, { method: "POST", body: "{" }))
          assert.strictEqual(notJson.status, 400)
          const role = yield* Effect.promise(() =>
            fetch(`${baseUrl}/api/chat`, { method: "POST", body: JSON.stringify({ model: "qwen-chat", messages: [{ role: "robot", content: "hi" }] }) })
          )
          assert.strictEqual(role.status, 400)
          const body: unknown = yield* Effect.promise(() => role.json())
          assert(typeof body === "object" && body !== null && "error" in body && typeof body.error === "string", JSON.stringify(body))
          assert.match(body.error, /^invalid messages\[0\]\.role: /)
        }))

      // Last: it kills the engine (the runtime repairs it behind the tests before).
      it.effect("the engine killed mid-stream: the stream's last line is the error; while it is repaired, chat is 503 with Retry-After", () =>
        Effect.gen(function*() {
          const { baseUrl, client, provider } = yield* OllamaTest
          const stream = yield* Effect.promise(() =>
            client.chat({
              model: "qwen-chat",
              messages: [{ role: "user", content: "Write a very long essay about the sea." }],
              stream: true,
              options: { temperature: 100, seed: 1, num_predict: 3000 }
            })
          )
          const iterator = stream[Symbol.asyncIterator]()
          assert.isFalse((yield* Effect.promise(() => iterator.next())).done)
          const { engine } = yield* provider.readiness
          assert(engine.pid !== null, "no engine pid")
          process.kill(engine.pid, "SIGKILL")
          // Ollama's client throws the `{"error": ...}` line's message.
          const failed = yield* Effect.flip(Effect.tryPromise(async () => {
            for (let next = await iterator.next(); !next.done; next = await iterator.next()) {
              assert.isFalse(next.value.done, "the stream ended as if whole")
            }
          }))
          assert.instanceOf(failed.error, Error)
          assert.notInclude(failed.error.message, "Did not receive done", "the stream ended without an error line")
          const waiting = yield* Effect.promise(() =>
            fetch(`${baseUrl}/api/chat`, { method: "POST", body: JSON.stringify({ model: "qwen-chat", messages: greeting, stream: false }) })
          )
          assert.strictEqual(waiting.status, 503)
          assert.strictEqual(waiting.headers.get("retry-after"), "1")
          const body: unknown = yield* Effect.promise(() => waiting.json())
          assert(typeof body === "object" && body !== null && "error" in body && typeof body.error === "string", JSON.stringify(body))
          assert.match(body.error, /^the engine is (starting|loading|warming|repairing)/)
        }))
    }
  )
})
