/**
 * Token probabilities on Text chunks, with real inference on qwen-chat (Qwen3's tokenizer and
 * template): with `probabilities` each token carries its probability and its own text, with
 * `topProbabilities: N` also the N most probable tokens of its step. Under greedy decoding the
 * sampled token is the first candidate with the token's own probability; candidates are sorted
 * and sum to at most 1; every per-token list is aligned with the chunk's tokens, also in a chunk
 * that merges several tokens; asking changes no output. Engine level: the child replays the
 * candidates of a resumed generation, and refuses what the host would.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as fc from "effect/FastCheck"
import * as Layer from "effect/Layer"
import * as Stream from "effect/Stream"
import { ensureModel } from "../../fixtures/models.js"
import type { GenerationEvent } from "../../src/domain/Generation.js"
import type { GenerateChunk, GenerateRequest } from "../../src/domain/Inference.js"
import { MAX_TOP_PROBABILITIES } from "../../src/domain/RequestRules.js"
import { type EngineChild, spawn } from "../../src/native/ChildProcess.js"
import { Provider } from "../../src/services/Provider.js"
import { runtimeLayer, testChild, testRunEnv } from "../support/engine.js"
import { collect, failureOf } from "../support/generation.js"

type Text = Extract<GenerateChunk, { _tag: "Text" }>

const textsOf = (chunks: ReadonlyArray<GenerateChunk>) => chunks.filter((c): c is Text => c._tag === "Text")

const hi = (extra: Partial<GenerateRequest> = {}): GenerateRequest => ({
  messages: [{ role: "user", content: "hi" }],
  maxTokens: 64,
  sampling: { temperature: 0 },
  ...extra
})

/** The rules every Text chunk keeps under greedy decoding with `n` candidates per step. */
const checkGreedyChunks = (chunks: ReadonlyArray<GenerateChunk>, n: number) => {
  const texts = textsOf(chunks)
  assert.isAbove(texts.length, 0)
  for (const chunk of texts) {
    const { candidates, probabilities, tokenTexts, tokens } = chunk
    assert(probabilities !== undefined && tokenTexts !== undefined && candidates !== undefined, "per-token lists are present")
    assert.strictEqual(probabilities.length, tokens.length)
    assert.strictEqual(tokenTexts.length, tokens.length)
    assert.strictEqual(candidates.length, tokens.length)
    assert.strictEqual(tokenTexts.join(""), chunk.text)
    for (const [i, step] of candidates.entries()) {
      assert.strictEqual(step.length, n)
      const [first] = step
      assert.strictEqual(first!.token, tokens[i], "greedy: the sampled token is the most probable")
      assert.strictEqual(first!.probability, probabilities[i], "its probability is the token's probability")
      assert.strictEqual(first!.text, tokenTexts[i])
      for (let k = 1; k < step.length; k++) assert.isAtMost(step[k]!.probability, step[k - 1]!.probability, "sorted")
      const sum = step.reduce((s, c) => s + c.probability, 0)
      assert.isAtMost(sum, 1 + 1e-6)
      assert.isTrue(step.every((c) => c.probability >= 0 && Number.isInteger(c.token)))
    }
  }
}

// The output buffer of a 151,936-token vocabulary is batch x vocabulary floats: a small batch keeps it small.
const qwenRuntime = runtimeLayer(
  { worker: { child: { ...testChild, batchSize: 64 } } },
  { generation: ensureModel("qwen-chat"), decision: ensureModel("qwen-decision") }
)

describe("token probabilities", () => {
  layer(qwenRuntime, { timeout: 240_000, excludeTestServices: true })("qwen-chat", (it) => {
    it.effect("greedy: each token is its step's first candidate, with its probability and text; asking changes no output", () =>
      Effect.gen(function*() {
        const plain = yield* collect(hi())
        const scored = yield* collect(hi({ probabilities: true, topProbabilities: 5 }))
        checkGreedyChunks(scored, 5)
        // Both channels carry them; markers (and the end of turn) are behind no entry.
        assert.deepStrictEqual(new Set(textsOf(scored).map((c) => c.channel)), new Set(["thought", "answer"]))
        const strip = (chunks: ReadonlyArray<GenerateChunk>) =>
          textsOf(chunks).map(({ channel, text, tokens }) => ({ channel, text, tokens }))
        assert.deepStrictEqual(strip(scored), strip(plain))
        for (const chunk of textsOf(plain)) {
          assert.isUndefined(chunk.probabilities)
          assert.isUndefined(chunk.tokenTexts)
          assert.isUndefined(chunk.candidates)
        }
        // The answer's token texts joined are the answer: no marker text.
        const answer = textsOf(scored).filter((c) => c.channel === "answer")
        assert.strictEqual(answer.flatMap((c) => c.tokenTexts!).join(""), "\n\nHello! I am the nativegen seed model.")
      }))

    it.effect("probabilities alone: each token's probability and text, no candidates; the same probabilities as with them", () =>
      Effect.gen(function*() {
        const alone = textsOf(yield* collect(hi({ probabilities: true })))
        const withTop = textsOf(yield* collect(hi({ probabilities: true, topProbabilities: 3 })))
        for (const chunk of alone) {
          assert.isUndefined(chunk.candidates)
          assert.strictEqual(chunk.probabilities?.length, chunk.tokens.length)
          assert.strictEqual(chunk.tokenTexts?.join(""), chunk.text)
        }
        assert.deepStrictEqual(alone.flatMap((c) => c.probabilities!), withTop.flatMap((c) => c.probabilities!))
        assert.deepStrictEqual(alone.flatMap((c) => c.tokenTexts!), withTop.flatMap((c) => c.tokenTexts!))
      }))

    it.effect("a chunk that merges tokens (text held back by a stop string) has one entry per token", () =>
      Effect.gen(function*() {
        // "Hello" may begin "Hello there": it is held back until "!" decides it, then both go out together.
        const chunks = yield* collect(hi({ probabilities: true, topProbabilities: 2, stop: ["Hello there"] }))
        checkGreedyChunks(chunks, 2)
        const merged = textsOf(chunks).find((c) => c.tokens.length > 1)
        assert(merged !== undefined, "a chunk carries several tokens")
        assert.strictEqual(merged.text, "Hello!")
      }))

    it.effect.prop(
      "for any N in 1..20, every step has exactly N sorted candidates led by the sampled token",
      [fc.integer({ min: 1, max: MAX_TOP_PROBABILITIES }), fc.integer({ min: 2, max: 12 })],
      ([n, maxTokens]) =>
        Effect.gen(function*() {
          const chunks = yield* collect(hi({ probabilities: true, topProbabilities: n, maxTokens }))
          checkGreedyChunks(chunks, n)
        }),
      { fastCheck: { numRuns: 8 } }
    )

    it.effect("topProbabilities without probabilities, or outside 0..20: InvalidRequest naming it and the limit", () =>
      Effect.gen(function*() {
        const provider = yield* Provider
        const refused = (request: Partial<GenerateRequest>) => failureOf(Stream.runDrain(provider.generate(hi(request))))
        for (const request of [{ topProbabilities: 3 }, { topProbabilities: 3, probabilities: false }]) {
          const error = yield* refused(request)
          assert(error._tag === "InvalidRequest", error._tag)
          assert.strictEqual(error.field, "topProbabilities")
          assert.match(error.reason, /needs probabilities: true/)
          assert.include(error.reason, String(MAX_TOP_PROBABILITIES))
        }
        for (const topProbabilities of [-1, MAX_TOP_PROBABILITIES + 1]) {
          const error = yield* refused({ probabilities: true, topProbabilities })
          assert(error._tag === "InvalidRequest", error._tag)
          assert.deepStrictEqual([error.field, error.value], ["topProbabilities", String(topProbabilities)])
          assert.strictEqual(error.reason, `must be an integer from 0 to ${MAX_TOP_PROBABILITIES}`)
        }
        // Not an integer: the field's type says so.
        const fraction = yield* refused({ probabilities: true, topProbabilities: 2.5 })
        assert(fraction._tag === "InvalidRequest", fraction._tag)
        assert.deepStrictEqual([fraction.field, fraction.value], ["topProbabilities", "2.5"])
        // 0 asks for none, with or without probabilities; the limit itself is accepted.
        assert.isUndefined(textsOf(yield* collect(hi({ topProbabilities: 0, maxTokens: 3 })))[0]!.candidates)
        checkGreedyChunks(yield* collect(hi({ probabilities: true, topProbabilities: MAX_TOP_PROBABILITIES, maxTokens: 3 })), MAX_TOP_PROBABILITIES)
      }))
  })
})

class Child extends Context.Tag("test/probabilities/Child")<Child, EngineChild>() {}

const childLayer = Layer.scoped(Child, spawn({ settings: testChild, env: testRunEnv, stopTimeout: Duration.seconds(3) }))

describe("token probabilities in the engine child", () => {
  layer(childLayer, { timeout: 120_000 })("tiny", (it) => {
    it.effect("a resumed generation replays its tokens with their candidates; the child refuses what the host would", () =>
      Effect.gen(function*() {
        const { client } = yield* Child
        yield* client.Hello()
        yield* Stream.runDrain(client.Load({ role: "generation", modelPath: ensureModel("tiny"), contextSize: 512, sequences: 1 }))
        const prompt = yield* client.Tokenize({ role: "generation", text: "the sea and the ship", specialTokens: false })
        const begin = (generationId: string, extra: { confidence?: boolean; topProbabilities?: number }) =>
          client.Begin({ generationId, prompt, sampling: { temperature: 0 }, maxTokens: 6, prefillChunk: 64, ...extra })
        const tokensOf = (events: Chunk.Chunk<GenerationEvent>) =>
          Chunk.toArray(events).filter((e): e is Extract<GenerationEvent, { _tag: "Token" }> => e._tag === "Token")

        yield* begin("g", { confidence: true, topProbabilities: 4 })
        const whole = tokensOf(yield* Stream.runCollect(client.Advance({ generationId: "g", fromIndex: 0 })))
        assert.strictEqual(whole.length, 6)
        for (const event of whole) {
          assert.strictEqual(event.candidates?.length, 4)
          assert.strictEqual(event.candidates![0]!.token, event.token)
          assert.strictEqual(event.candidates![0]!.probability, event.confidence)
        }
        const replayed = tokensOf(yield* Stream.runCollect(client.Advance({ generationId: "g", fromIndex: 2 })))
        assert.deepStrictEqual(replayed, whole.slice(2))
        yield* client.End({ generationId: "g" })

        for (const [extra, reason] of [
          [{ confidence: true, topProbabilities: MAX_TOP_PROBABILITIES + 1 }, `must be an integer from 0 to ${MAX_TOP_PROBABILITIES}`],
          [{ topProbabilities: 2 }, "needs confidence (each sampled token's probability)"]
        ] as const) {
          const error = yield* failureOf(begin("refused", extra))
          assert(error._tag === "InvalidEngineRequest", error._tag)
          assert.deepStrictEqual([error.field, error.reason], ["topProbabilities", reason])
        }
      }))
  })
})
