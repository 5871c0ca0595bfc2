/**
 * Plain-text prompts (completion APIs): the text is the generation model's prompt as it stands,
 * its special-token texts read as those tokens, no chat template. On qwen-chat (Qwen3's real
 * tokenizer and template) a plain prompt that is the template's own rendering of a chat is the
 * chat request, token for token, and greedy output is the same; stop strings apply; a conversation
 * id gives prefix reuse; what only a chat has (messages, a checkpoint, tools, thinking) is refused.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import { ensureModel } from "../../fixtures/models.js"
import { qwen3Vocabulary } from "../../fixtures/qwen3-vocab.js"
import type { ChatMessage, GenerateChunk, GenerateRequest } from "../../src/domain/Inference.js"
import { NativeWorker } from "../../src/services/NativeWorker.js"
import { Provider } from "../../src/services/Provider.js"
import { runtimeLayer, testChild } from "../support/engine.js"
import { answerOf, collect, doneOf, failureOf } from "../support/generation.js"

const vocab = qwen3Vocabulary()

/**
 * The chunks without the Done chunk's timings (and checkpoint) and what it reused (a repeated
 * prompt keeps its whole prefill), which differ between runs.
 */
const outputOf = (chunks: ReadonlyArray<GenerateChunk>) =>
  chunks.map((c) =>
    c._tag === "Done"
      ? { stopReason: c.stopReason, promptTokens: c.usage.promptTokens, generatedTokens: c.usage.generatedTokens }
      : c
  )

const hi: ReadonlyArray<ChatMessage> = [{ role: "user", content: "hi" }]
const greedy = { sampling: { temperature: 0 }, maxTokens: 64 } as const

// The output buffer of a 151,936-token vocabulary is batch x vocabulary floats: a small batch keeps it small.
const qwenRuntime = runtimeLayer(
  { worker: { child: { ...testChild, batchSize: 64 } } },
  { generation: ensureModel("qwen-chat"), decision: ensureModel("qwen-decision") }
)

describe("plain-text prompts", () => {
  layer(qwenRuntime, { timeout: 180_000, excludeTestServices: true })("qwen-chat", (it) => {
    it.effect("the template's rendering of a chat, as a plain prompt, is the chat request: same tokens, same output", () =>
      Effect.gen(function*() {
        const worker = yield* NativeWorker
        for (const thinking of [undefined, false]) {
          const inputs = thinking === undefined ? {} : { thinking }
          const text = yield* worker.renderText("generation", hi, true, inputs)
          assert.deepStrictEqual(yield* worker.tokenize("generation", text, true), yield* worker.render("generation", hi, true, inputs))
          const chat = yield* collect({ messages: hi, ...inputs, ...greedy })
          const plain = yield* collect({ messages: [], prompt: text, ...greedy })
          assert.deepStrictEqual(outputOf(plain), outputOf(chat), `thinking ${thinking}`)
          assert.strictEqual(doneOf(plain).stopReason, "endOfGeneration")
          assert.isAbove(doneOf(plain).usage.generatedTokens, 4)
        }
      }))

    it.effect("special-token texts in the prompt are those tokens; Tokenize's plain text reads them as characters", () =>
      Effect.gen(function*() {
        const worker = yield* NativeWorker
        const provider = yield* Provider
        const prompt = "<|im_start|>user\nhi<|im_end|>"
        const tokens = yield* worker.tokenize("generation", prompt, true)
        assert.strictEqual(tokens[0], vocab.ids.turnStart)
        assert.strictEqual(tokens.at(-1), vocab.ids.turnEnd)
        const done = doneOf(yield* collect({ messages: [], prompt, maxTokens: 1 }))
        assert.strictEqual(done.usage.promptTokens, tokens.length)
        // Counted as plain text (no special tokens), the marker texts are several tokens each.
        const { tokens: asText } = yield* provider.tokenize({ text: prompt })
        assert.isAbove(asText.length, tokens.length)
        assert.notInclude(asText, vocab.ids.turnStart)
        // A lone special token is one prompt token.
        const lone = doneOf(yield* collect({ messages: [], prompt: "<|im_start|>", maxTokens: 1 }))
        assert.strictEqual(lone.usage.promptTokens, 1)
      }))

    it.effect("stop strings and max tokens apply as for a chat", () =>
      Effect.gen(function*() {
        const worker = yield* NativeWorker
        const text = yield* worker.renderText("generation", hi, true, { thinking: false })
        const stopped = yield* collect({ messages: [], prompt: text, ...greedy, stop: ["seed"] })
        assert.strictEqual(doneOf(stopped).stopReason, "stopString")
        // The prompt ends in the empty thought's "\n\n": the answer is the rest of the reply.
        assert.strictEqual(answerOf(stopped), "Hello! I am the nativegen ")
        assert.deepStrictEqual(outputOf(stopped), outputOf(yield* collect({ messages: hi, thinking: false, ...greedy, stop: ["seed"] })))
        const cut = yield* collect({ messages: [], prompt: text, ...greedy, maxTokens: 3 })
        assert.strictEqual(doneOf(cut).stopReason, "maxTokens")
        assert.strictEqual(doneOf(cut).usage.generatedTokens, 3)
      }))

    it.effect("a conversation id gives prefix reuse in its slot; the output equals the chat request's", () =>
      Effect.gen(function*() {
        const worker = yield* NativeWorker
        const long: ReadonlyArray<ChatMessage> = [{ role: "user", content: Array.from({ length: 60 }, (_, i) => `word${i}`).join(" ") }]
        const first = yield* collect({ messages: [], prompt: yield* worker.renderText("generation", long, true, {}), conversation: "raw", ...greedy })
        assert.strictEqual(doneOf(first).usage.reusedTokens, 0)
        const next: ReadonlyArray<ChatMessage> = [...long, { role: "assistant", content: answerOf(first) }, { role: "user", content: "again" }]
        const second = yield* collect({ messages: [], prompt: yield* worker.renderText("generation", next, true, {}), conversation: "raw", ...greedy })
        const usage = doneOf(second).usage
        assert.strictEqual(usage.reuse, "prefix")
        assert.isAbove(usage.reusedTokens, 64)
        assert.strictEqual(usage.reusedTokens % 64, 0, "reuse ends on the prefill chunk grid")
        const chat = yield* collect({ messages: next, ...greedy })
        assert.deepStrictEqual(
          second.filter((c) => c._tag === "Text"),
          chat.filter((c) => c._tag === "Text")
        )
      }))

    it.effect("an empty prompt, messages beside it, a checkpoint, tools or thinking: InvalidRequest naming the field", () =>
      Effect.gen(function*() {
        const provider = yield* Provider
        const refused = (request: Partial<GenerateRequest>) =>
          failureOf(Stream.runDrain(provider.generate({ messages: [], prompt: "hello", maxTokens: 4, ...request })))
        const cases: ReadonlyArray<readonly [Partial<GenerateRequest>, string, RegExp]> = [
          [{ prompt: "" }, "prompt", /must not be empty/],
          [{ messages: hi }, "messages", /must be empty with a plain-text prompt/],
          [{ checkpoint: { conversation: "c", tokens: 3, hash: "x" } }, "checkpoint", /continues no checkpoint/],
          [{ tools: [{ name: "f", parameters: { type: "object" } }] }, "tools", /chat template/],
          [{ thinking: false }, "thinking", /chat template/]
        ]
        for (const [request, field, reason] of cases) {
          const error = yield* refused(request)
          assert(error._tag === "InvalidRequest", `${field}: ${error._tag}`)
          assert.strictEqual(error.field, field)
          assert.match(error.reason, reason)
        }
        // Neither a prompt nor messages: the chat's rule.
        const none = yield* failureOf(Stream.runDrain(provider.generate({ messages: [], maxTokens: 4 })))
        assert(none._tag === "InvalidRequest")
        assert.strictEqual(none.field, "messages")
      }))
  })
})
