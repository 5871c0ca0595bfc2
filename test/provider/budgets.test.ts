/**
 * Exact budgets and request validation through the Provider, with a real engine child: a prompt
 * is counted in real tokens through the chat template; prompt + max tokens at or under the
 * admitted context runs, one over is refused with the three numbers; without max tokens the
 * output runs to the end of the context; stop strings cut the real
 * output; bad requests get typed errors naming the field and value, and nothing is left behind.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import type { GenerateChunk, GenerateRequest } from "../../src/domain/Inference.js"
import { Provider } from "../../src/services/Provider.js"
import { Scheduler } from "../../src/services/Scheduler.js"
import { runtimeLayer } from "../support/engine.js"

const CONTEXT = 512
const DECISION_CONTEXT = 256
const messages = [{ role: "user", content: "count the waves on the shore" }] as const

const collect = (provider: Provider["Type"], request: GenerateRequest) =>
  Effect.map(Stream.runCollect(provider.generate(request)), Chunk.toArray)

const done = (chunks: ReadonlyArray<GenerateChunk>) => {
  const last = chunks.at(-1)
  if (last?._tag !== "Done") throw new Error("the last chunk is not Done")
  return last
}

const answer = (chunks: ReadonlyArray<GenerateChunk>) =>
  chunks.map((c) => (c._tag === "Text" && c.channel === "answer" ? c.text : "")).join("")

describe("Provider budgets and validation", () => {
  layer(runtimeLayer({ admission: { contextCap: { generation: CONTEXT, decision: DECISION_CONTEXT } } }), {
    timeout: 120_000,
    excludeTestServices: true
  })("generation context 512", (it) => {
    it.effect("prompt + max tokens: at and just under the admitted context run to the end; just over is refused with the numbers", () =>
      Effect.gen(function*() {
        const provider = yield* Provider
        const counted = yield* provider.count({ messages })
        assert.strictEqual(counted.admittedContext, CONTEXT)
        const prompt = counted.tokens
        const over = yield* Effect.flip(collect(provider, { messages, maxTokens: CONTEXT - prompt + 1 }))
        assert.strictEqual(over._tag, "ContextExceeded")
        if (over._tag === "ContextExceeded") {
          assert.deepStrictEqual([over.promptTokens, over.outputTokens, over.admittedContext], [prompt, CONTEXT - prompt + 1, CONTEXT])
          assert.match(over.message, new RegExp(`${prompt} prompt tokens \\+ ${CONTEXT - prompt + 1} output tokens exceed the admitted generation context of ${CONTEXT}`))
        }
        for (const maxTokens of [CONTEXT - prompt, CONTEXT - prompt - 1]) {
          const chunks = yield* collect(provider, { messages, maxTokens })
          const d = done(chunks)
          assert.deepStrictEqual([d.usage.promptTokens, d.usage.generatedTokens, d.stopReason], [prompt, maxTokens, "maxTokens"])
        }
      }))

    it.effect("without maxTokens the output runs to the end of the context (stopReason maxTokens); a prompt that fills it is refused with the numbers", () =>
      Effect.gen(function*() {
        const provider = yield* Provider
        const base = (yield* provider.count({ messages })).tokens
        /** The messages padded with " a" (one token each) to a rendered prompt of exactly `n` tokens. */
        const promptOf = (n: number) =>
          Effect.gen(function*() {
            const padded = [{ role: "user" as const, content: messages[0].content + " a".repeat(n - base) }]
            assert.strictEqual((yield* provider.count({ messages: padded })).tokens, n)
            return padded
          })
        for (const room of [5, 1]) {
          const d = done(yield* collect(provider, { messages: yield* promptOf(CONTEXT - room), sampling: { temperature: 0 } }))
          assert.deepStrictEqual([d.usage.promptTokens, d.usage.generatedTokens, d.stopReason], [CONTEXT - room, room, "maxTokens"])
        }
        for (const promptTokens of [CONTEXT, CONTEXT + 3]) {
          const refused = yield* Effect.flip(collect(provider, { messages: yield* promptOf(promptTokens) }))
          assert(refused._tag === "ContextExceeded", `expected ContextExceeded, got ${refused._tag}`)
          assert.deepStrictEqual(
            [refused.role, refused.promptTokens, refused.outputTokens, refused.admittedContext],
            ["generation", promptTokens, 1, CONTEXT]
          )
        }
        const status = yield* (yield* Scheduler).status
        assert.deepStrictEqual([status.running, status.queued], [0, 0])
      }))

    it.effect("a decision: prompt + longest label at the admitted decision context runs; one over is refused with the numbers before it is queued", () =>
      Effect.gen(function*() {
        const provider = yield* Provider
        const scheduler = yield* Scheduler
        const labels = ["yes", "not at all"]
        const labelTokens = yield* Effect.forEach(labels, (text) => provider.count({ role: "decision", text }))
        const longest = Math.max(...labelTokens.map((c) => c.tokens))
        assert.strictEqual(labelTokens[0]!.admittedContext, DECISION_CONTEXT)
        /** A prompt text of exactly `n` decision tokens ("a" is one token, and so is " a"). */
        const promptOf = (n: number) =>
          Effect.gen(function*() {
            const text = Array.from({ length: n }, () => "a").join(" ")
            assert.strictEqual((yield* provider.count({ role: "decision", text })).tokens, n)
            return text
          })
        const fits = yield* promptOf(DECISION_CONTEXT - longest)
        const over = yield* promptOf(DECISION_CONTEXT - longest + 1)
        const refused = yield* Effect.flip(provider.decide({ prompt: over, heads: [{ name: "h", labels }] }))
        assert(refused._tag === "ContextExceeded", `expected ContextExceeded, got ${refused._tag}`)
        assert.deepStrictEqual(
          [refused.role, refused.promptTokens, refused.outputTokens, refused.admittedContext],
          ["decision", DECISION_CONTEXT - longest + 1, longest, DECISION_CONTEXT]
        )
        assert.match(refused.message, new RegExp(`exceed the admitted decision context of ${DECISION_CONTEXT}`))
        const status = yield* scheduler.status
        assert.deepStrictEqual([status.running, status.queued], [0, 0])
        const decided = yield* provider.decide({ prompt: fits, heads: [{ name: "h", labels }] })
        assert.strictEqual(decided.promptTokens, DECISION_CONTEXT - longest)
        assert.strictEqual(decided.heads[0]!.labels.length, 2)
      }))

    it.effect("a stop string in the real output ends the answer right before it", () =>
      Effect.gen(function*() {
        const provider = yield* Provider
        const full = answer(yield* collect(provider, { messages, maxTokens: 40 }))
        // A stop string that starts in the middle of the output and spans whatever tokens it spans.
        const at = Math.floor(full.length / 2)
        const stop = full.slice(at, at + 4)
        assert.strictEqual(stop.length, 4)
        const chunks = yield* collect(provider, { messages, maxTokens: 40, stop: [stop] })
        assert.strictEqual(answer(chunks), full.slice(0, full.indexOf(stop)))
        assert.strictEqual(done(chunks).stopReason, "stopString")
      }))

    it.effect("bad requests are typed errors naming the field and the value; nothing is left admitted", () =>
      Effect.gen(function*() {
        const provider = yield* Provider
        const refused = (request: GenerateRequest) => Effect.flip(collect(provider, request))
        const cases: ReadonlyArray<[GenerateRequest, string, RegExp]> = [
          [{ messages, maxTokens: 0 }, "maxTokens", /invalid maxTokens 0: must be a positive integer/],
          [{ messages, maxTokens: -3 }, "maxTokens", /-3/],
          [{ messages, maxTokens: 1.5 }, "maxTokens", /1\.5/],
          [{ messages: [], maxTokens: 4 }, "messages", /at least one message/],
          [{ messages, maxTokens: 4, stop: [""] }, "stop", /must not be empty/],
          [{ messages, maxTokens: 4, sampling: { temperature: -1 } }, "sampling.temperature", /-1/],
          [{ messages, maxTokens: 4, sampling: { temperature: 1, topP: 0 } }, "sampling.topP", /\(0, 1\]/]
        ]
        for (const [request, field, message] of cases) {
          const error = yield* refused(request)
          assert.strictEqual(error._tag, "InvalidRequest", field)
          if (error._tag === "InvalidRequest") assert.strictEqual(error.field, field)
          assert.match(error.message, message)
        }
        const noHeads = yield* Effect.flip(provider.decide({ prompt: "x", heads: [] }))
        assert.strictEqual(noHeads._tag, "InvalidRequest")
        const manyHeads = yield* Effect.flip(provider.decide({
          prompt: "x",
          heads: Array.from({ length: 17 }, (_, i) => ({ name: `h${i}`, labels: ["a", "b"] }))
        }))
        assert.match(manyHeads.message, /at most 16 heads/)
        const dupLabels = yield* Effect.flip(provider.decide({ prompt: "x", heads: [{ name: "h", labels: ["a", "a"] }] }))
        assert.strictEqual(dupLabels._tag, "InvalidRequest")
        const both = yield* Effect.flip(provider.count({ messages, text: "x" }))
        assert.match(both.message, /exactly one of messages or text/)
        const status = yield* (yield* Scheduler).status
        assert.deepStrictEqual([status.running, status.queued], [0, 0])
        // The runtime still serves.
        assert.strictEqual(done(yield* collect(provider, { messages, maxTokens: 2 })).usage.generatedTokens, 2)
      }))
  })
})
