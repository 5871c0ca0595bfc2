/**
 * Prefill steps: with nothing else waiting, one step prefills a native batch's worth of chunks,
 * each still its own native call on the chunk grid, so output and probabilities are bit-identical
 * to one chunk per step; a decision that comes during a long prefill is served after the chunk in
 * flight; a cancel during a long prefill step lands after the chunk in flight; a continuation that
 * begins off the grid prefills its new tokens in as few native calls as the chunk size allows. In
 * process, composed as Engine.make composes them, on the tiny model (1 thread).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Stream from "effect/Stream"
import { ensureModel } from "../../fixtures/models.js"
import * as Generation from "../../src/native/engine/Generation.js"
import * as Llama from "../../src/native/engine/Llama.js"
import * as Residents from "../../src/native/engine/Residents.js"
import * as Scoring from "../../src/native/engine/Scoring.js"

const CHUNK = 32
const BATCH = 256

const build = (batchSize: number) =>
  Effect.gen(function*() {
    const native = yield* Llama.make({ backend: "cpu", threads: 1, batchSize })
    const residents = yield* Residents.make(native, undefined)
    const generations = yield* Generation.make(native, residents, undefined)
    const scoring = yield* Scoring.make(native, residents, undefined)
    yield* Stream.runDrain(residents.load("generation", ensureModel("tiny"), 1024, 1))
    yield* Stream.runDrain(residents.load("decision", ensureModel("decision"), 256, 1))
    const words = Array.from({ length: 120 }, (_, i) => `word${i} and`).join(" ")
    const prompt = yield* residents.tokenize("generation", words, false)
    return { native, residents, generations, scoring, prompt }
  })

let ids = 0
const begin = (generations: Generation.Generations, prompt: ReadonlyArray<number>) =>
  Effect.gen(function*() {
    const generationId = `p${++ids}`
    yield* generations.begin({
      generationId,
      lane: "foreground",
      sequence: 0,
      prompt,
      sampling: { temperature: 0 },
      maxTokens: 8,
      stopTokens: [],
      prefillChunk: CHUNK,
      confidence: true
    })
    return generationId
  })

describe("prefill steps", () => {
  it.scoped("uncontended, a step prefills several chunks on the grid; output and probabilities equal one chunk per step", () =>
    Effect.gen(function*() {
      const run = (batchSize: number) =>
        Effect.scoped(Effect.gen(function*() {
          const { generations, prompt } = yield* build(batchSize)
          assert.isAbove(prompt.length, 3 * BATCH / 2)
          const id = yield* begin(generations, prompt)
          const events = Chunk.toArray(yield* Stream.runCollect(generations.advance(id, 0)))
          return {
            prefilled: events.flatMap((e) => (e._tag === "Prefilled" ? [e.done] : [])),
            tokens: events.flatMap((e) => (e._tag === "Token" ? [[e.token, e.confidence]] : [])),
            last: prompt.length - 1
          }
        }))
      const coarse = yield* run(BATCH)
      const fine = yield* run(CHUNK)
      assert.deepStrictEqual(coarse.tokens, fine.tokens)
      assert.strictEqual(fine.prefilled.length, Math.ceil(fine.last / CHUNK))
      // Each step but the last ends on the grid, a native batch (BATCH / CHUNK chunks) after the last.
      assert.deepStrictEqual(coarse.prefilled.slice(0, -1), coarse.prefilled.slice(0, -1).map((_, i) => (i + 1) * BATCH))
      assert.strictEqual(coarse.prefilled.at(-1), coarse.last)
    }))

  it.scoped("a decision that comes during a long prefill is served after the chunk in flight", () =>
    Effect.gen(function*() {
      const { generations, prompt, residents, scoring } = yield* build(BATCH * 4)
      const sequence = (yield* residents.resident("generation")).sequences[0]!
      const id = yield* begin(generations, prompt)
      const generation = yield* Effect.fork(Stream.runDrain(generations.advance(id, 0)))
      // The first step has already reached past its first chunks when the decision comes.
      yield* Effect.yieldNow()
      const before = sequence.nextTokenIndex
      const scored = yield* scoring.score([5, 6, 7], [{ name: "answer", labels: ["yes", "no"] }], CHUNK).pipe(
        Stream.runCollect,
        Effect.map(() => sequence.nextTokenIndex)
      )
      assert.isBelow(before, prompt.length - 1 - CHUNK, "the prefill had ended before the decision came")
      assert.isAtMost(scored - before, CHUNK, `prefilled ${scored - before} tokens while the decision waited`)
      yield* Fiber.join(generation)
    }))

  it.scoped("a cancel during a long prefill step lands after the chunk in flight, not at the end of the step", () =>
    Effect.gen(function*() {
      const { generations, prompt, residents } = yield* build(BATCH * 4)
      const sequence = (yield* residents.resident("generation")).sequences[0]!
      assert.isAbove(prompt.length - 1, 4 * CHUNK, "one uncontended step would run many chunks")
      const id = yield* begin(generations, prompt)
      const generation = yield* Effect.fork(Stream.runDrain(generations.advance(id, 0)))
      // The first step has started its first chunk when the cancel comes.
      yield* Effect.yieldNow()
      const before = sequence.nextTokenIndex
      yield* Fiber.interrupt(generation)
      const after = sequence.nextTokenIndex
      yield* generations.end(id)
      assert.isAtMost(after - before, CHUNK, `prefilled ${after - before} tokens after the cancel`)
      assert.isAbove(after, 0, "the chunk in flight completed")
    }))

  it.scoped("a continuation that begins off the grid prefills its new tokens in as few native calls as chunks allow", () =>
    Effect.gen(function*() {
      const { generations, native, prompt } = yield* build(BATCH)
      const history = prompt.slice(0, 3 * CHUNK + 5)
      const first = yield* begin(generations, history)
      const reply = yield* generations.advance(first, 0).pipe(
        Stream.filter((e) => e._tag === "Token"),
        Stream.map((e) => e.token),
        Stream.runCollect,
        Effect.map(Chunk.toArray),
        Effect.ensuring(generations.end(first))
      )
      assert.isAbove(reply.length, 0)
      // Turns that add n new tokens to prefill (the last one is sampled from): one call below two
      // chunks, then a chunk per call with the rest below a chunk joined to the last call.
      for (const n of [CHUNK + 7, 2 * CHUNK + 3, 3 * CHUNK + 31]) {
        const turn = [...history, ...reply, ...prompt.slice(history.length, history.length + n)]
        const generationId = `p${++ids}`
        const { reusedTokens } = yield* generations.begin({
          generationId,
          lane: "foreground",
          sequence: 0,
          prompt: turn,
          sampling: { temperature: 0 },
          maxTokens: 1,
          stopTokens: [],
          prefillChunk: CHUNK
        })
        assert.notStrictEqual(reusedTokens % CHUNK, 0, "the continuation begins off the grid")
        const prefilling = turn.length - 1 - reusedTokens
        const before = native.counters().nativeBatches
        const events = Chunk.toArray(yield* Stream.runCollect(generations.advance(generationId, 0)))
        yield* generations.end(generationId)
        // One native batch per prefill call, and one for the sampled token.
        const calls = native.counters().nativeBatches - before - 1
        assert.strictEqual(calls, Math.max(1, Math.floor(prefilling / CHUNK)), `${prefilling} tokens in ${calls} calls`)
        assert.strictEqual(events.filter((e) => e._tag === "Token").length, 1)
      }
    }))
})
