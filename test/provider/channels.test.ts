/**
 * Channels, stop strings, end of turn and continuation reuse end to end: the real engine on the
 * scripted Qwen3 models, whose markers are Qwen3's own tokens (`<think>`, `</think>` are
 * user-defined added tokens, `<|im_end|>` the end-of-turn token). qwen-chat answers every chat
 * with `<think>` thought `</think>` answer `<|im_end|>`; qwen-broken emits an unmatched `</think>`.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import { ensureModel, modelSpecs } from "../../fixtures/models.js"
import { scriptOf } from "../../fixtures/qwen3-models.js"
import { qwen3Vocabulary } from "../../fixtures/qwen3-vocab.js"
import type { GenerateChunk, GenerateRequest } from "../../src/domain/Inference.js"
import { MalformedChannel } from "../../src/services/ChannelDecoder.js"
import { Provider } from "../../src/services/Provider.js"
import { runtimeLayer, testChild } from "../support/engine.js"
import { collect, doneOf, textOf, tokensOf } from "../support/generation.js"

const thought = "The user greets me; a short, friendly reply fits.\n"
const answer = "\n\nHello! I am the nativegen seed model."
const vocab = qwen3Vocabulary()
const chatScript = scriptOf(modelSpecs["qwen-chat"])
/** The script's plain tokens: what Text chunks carry (markers and the end of turn are consumed). */
const plainTokens = chatScript.filter((t) => t !== vocab.ids.thinkOpen && t !== vocab.ids.thinkClose && t !== vocab.ids.turnEnd)

const hi = (extra: Partial<GenerateRequest> = {}): GenerateRequest => ({
  messages: [{ role: "user", content: "hi" }],
  maxTokens: 64,
  sampling: { temperature: 0 },
  ...extra
})

// The output buffer of a 151,936-token vocabulary is batch x vocabulary floats: a small batch keeps it small.
const qwenRuntime = (generation: "qwen-chat" | "qwen-broken") =>
  runtimeLayer(
    { worker: { child: { ...testChild, batchSize: 64 } } },
    { generation: ensureModel(generation), decision: ensureModel("qwen-decision") }
  )

describe("channels end to end with Qwen3's marker tokens", () => {
  layer(qwenRuntime("qwen-chat"), { timeout: 180_000, excludeTestServices: true })("qwen-chat", (it) => {
    it.effect("thought then answer arrive as their channels; the markers are consumed; <|im_end|> ends the turn", () =>
      Effect.gen(function*() {
        const chunks = yield* collect(hi())
        assert.strictEqual(textOf(chunks, "thought"), thought)
        assert.strictEqual(textOf(chunks, "answer"), answer)
        assert.strictEqual(textOf(chunks, "tool"), "")
        // Thought chunks first, then answer chunks, then Done; no marker text anywhere.
        const order = chunks.map((c) => (c._tag === "Text" ? c.channel : c._tag))
        assert.deepStrictEqual(order, [...order.filter((c) => c === "thought"), ...order.filter((c) => c === "answer"), "Done"])
        for (const c of chunks) if (c._tag === "Text") assert.notMatch(c.text, /<\/?think>|<\|im_end\|>/)
        assert.deepStrictEqual(tokensOf(chunks), plainTokens)
        const done = doneOf(chunks)
        assert.strictEqual(done.stopReason, "endOfGeneration")
        assert.isUndefined(done.truncatedChannel)
        // Every generated token up to the end of turn (which ends the output, unreported) is counted.
        assert.strictEqual(done.usage.generatedTokens, chatScript.length - 1)
      }))

    it.effect("without maxTokens a short reply runs to its end of turn", () =>
      Effect.gen(function*() {
        const chunks = yield* collect({ messages: [{ role: "user", content: "hi" }], sampling: { temperature: 0 } })
        assert.strictEqual(textOf(chunks, "thought"), thought)
        assert.strictEqual(textOf(chunks, "answer"), answer)
        const done = doneOf(chunks)
        assert.strictEqual(done.stopReason, "endOfGeneration")
        assert.strictEqual(done.usage.generatedTokens, chatScript.length - 1)
      }))

    it.effect("a stop string inside the answer ends it before the string; one found only in the thought does not stop", () =>
      Effect.gen(function*() {
        const stopped = yield* collect(hi({ stop: ["seed model"] }))
        assert.strictEqual(textOf(stopped, "thought"), thought)
        assert.strictEqual(textOf(stopped, "answer"), "\n\nHello! I am the nativegen ")
        assert.strictEqual(doneOf(stopped).stopReason, "stopString")
        const inThought = yield* collect(hi({ stop: ["friendly"] }))
        assert.strictEqual(textOf(inThought, "thought"), thought)
        assert.strictEqual(textOf(inThought, "answer"), answer)
        assert.strictEqual(doneOf(inThought).stopReason, "endOfGeneration")
      }))

    it.effect("maxTokens reached inside the thought delivers the thought so far and ends with maxTokens, the thought marked cut", () =>
      Effect.gen(function*() {
        // <think> and four thought tokens.
        const chunks = yield* collect(hi({ maxTokens: 5 }))
        assert.strictEqual(textOf(chunks, "thought"), "The user greets")
        assert.strictEqual(textOf(chunks, "answer"), "")
        const done = doneOf(chunks)
        assert.strictEqual(done.stopReason, "maxTokens")
        assert.strictEqual(done.truncatedChannel, "thought")
        assert.strictEqual(done.usage.generatedTokens, 5)
        // Cut in the answer: nothing is open, nothing is marked.
        const inAnswer = doneOf(yield* collect(hi({ maxTokens: 20 })))
        assert.strictEqual(inAnswer.stopReason, "maxTokens")
        assert.isUndefined(inAnswer.truncatedChannel)
      }))

    it.effect("a continuation reuses the conversation's cached prefix and answers with the script again", () =>
      Effect.gen(function*() {
        const conversation = "qwen-continuation"
        const first = yield* collect(hi({ conversation }))
        const firstDone = doneOf(first)
        // Not a continuation (its slot may hold the same prompt already, e.g. from the warm-up: then
        // its whole prefill is kept, bit-identical to a cold run).
        assert.include(["cold", "prefix"], firstDone.usage.reuse)
        const second = yield* collect({
          ...hi({ conversation }),
          messages: [
            { role: "user", content: "hi" },
            { role: "assistant", content: textOf(first, "answer") },
            { role: "user", content: "and who are you?" }
          ],
          ...(firstDone.checkpoint === undefined ? {} : { checkpoint: firstDone.checkpoint })
        })
        const done = doneOf(second)
        assert.strictEqual(done.usage.reuse, "continuation")
        // Everything the first turn held (its prompt and output as generated, thought included) is reused.
        assert.strictEqual(done.usage.reusedTokens, firstDone.usage.promptTokens + firstDone.usage.generatedTokens)
        assert.isAbove(done.usage.promptTokens, done.usage.reusedTokens)
        assert.strictEqual(textOf(second, "thought"), thought)
        assert.strictEqual(textOf(second, "answer"), answer)
        assert.strictEqual(done.stopReason, "endOfGeneration")
      }))
  })

  layer(qwenRuntime("qwen-broken"), { timeout: 180_000, excludeTestServices: true })("qwen-broken", (it) => {
    it.effect("an unmatched </think> from the model fails the stream with a typed MalformedChannel after the text before it", () =>
      Effect.gen(function*() {
        const provider = yield* Provider
        const delivered: Array<GenerateChunk> = []
        const error = yield* provider.generate(hi()).pipe(
          Stream.runForEach((chunk) => Effect.sync(() => delivered.push(chunk))),
          Effect.flip
        )
        assert.instanceOf(error, MalformedChannel)
        if (!(error instanceof MalformedChannel)) return
        const script = scriptOf(modelSpecs["qwen-broken"])
        const index = script.indexOf(vocab.ids.thinkClose)
        assert.deepStrictEqual(
          { reason: error.reason, token: error.token, marker: error.marker, index: error.index, open: error.open },
          { reason: "unmatchedCloser", token: vocab.ids.thinkClose, marker: "thinkClose", index, open: null }
        )
        assert.strictEqual(textOf(delivered, "answer"), "Hello there.")
        assert.isFalse(delivered.some((c) => c._tag === "Done"))
        // Even with a token limit right after the closer, it stays malformed.
        const limited = yield* Effect.flip(Stream.runDrain(provider.generate(hi({ maxTokens: index + 1 }))))
        assert.strictEqual(limited._tag, "MalformedChannel")
      }))
  })
})
