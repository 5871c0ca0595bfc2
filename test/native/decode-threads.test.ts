/**
 * Decode threads: decode steps run at their own thread count, prefill and every other native call
 * at the evaluation threads (llama.cpp's `--threads` / `--threads-batch` split). "auto" leaves a
 * CPU to the per-token JavaScript when the evaluation threads would take them all; the setting
 * crosses the child's environment; a real engine, composed as Engine.make composes it, switches
 * the context's native thread count per step, and greedy output is token-exact with a cold run at
 * one thread.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import * as fc from "effect/FastCheck"
import { ensureModel } from "../../fixtures/models.js"
import { childSettingsFromEnv, childSettingsToEnv, resolveDecodeThreads } from "../../src/native/ChildSettings.js"
import * as Generation from "../../src/native/engine/Generation.js"
import * as Llama from "../../src/native/engine/Llama.js"
import * as Residents from "../../src/native/engine/Residents.js"
import { testChild } from "../support/engine.js"

const CHUNK = 32

/**
 * The engine's parts as Engine.make composes them, with the contexts' batching schedule recording
 * the Llama's thread limit at each native batch's dispatch (node-llama-cpp gives the batch that
 * many threads when it dispatches it).
 */
const build = (threads: number, decodeThreads: number) =>
  Effect.gen(function*() {
    const llamaNative = yield* Llama.make({ backend: "cpu", threads, decodeThreads, batchSize: 128 })
    const dispatchedAt: Array<number> = []
    const native: Llama.Native = {
      ...llamaNative,
      batching: {
        dispatchSchedule: (dispatch) =>
          llamaNative.batching.dispatchSchedule(() => {
            dispatchedAt.push(llamaNative.llama.maxThreads)
            dispatch()
          })
      }
    }
    const residents = yield* Residents.make(native, undefined)
    const generations = yield* Generation.make(native, residents, undefined)
    yield* Stream.runDrain(residents.load("generation", ensureModel("tiny"), 1024, 2))
    const words = Array.from({ length: 60 }, (_, i) => `word${i} and`).join(" ")
    const prompt = yield* residents.tokenize("generation", words, false)
    const context = (yield* residents.resident("generation")).context
    return { native, generations, prompt, context, dispatchedAt }
  })

let ids = 0
/** One generation on `sequence` to its end; its tokens. */
const generate = (generations: Generation.Generations, prompt: ReadonlyArray<number>, sequence: number, prefillOnly: boolean) =>
  Effect.gen(function*() {
    const generationId = `d${++ids}`
    yield* generations.begin({
      generationId,
      lane: "foreground",
      sequence,
      prompt,
      sampling: { temperature: 0 },
      maxTokens: 12,
      stopTokens: [],
      prefillChunk: CHUNK,
      prefillOnly
    })
    const events = yield* Stream.runCollect(generations.advance(generationId, 0))
    yield* generations.end(generationId)
    return Chunk.toArray(events).flatMap((e) => (e._tag === "Token" ? [e.token] : []))
  })

describe("decode threads", () => {
  it.prop(
    "auto: the evaluation threads, less one when they take every CPU; a count is used as given, at most the evaluation threads",
    [fc.integer({ min: 1, max: 64 }), fc.integer({ min: 1, max: 64 }), fc.integer({ min: 1, max: 64 })],
    ([threads, cpus, count]) => {
      const auto = resolveDecodeThreads("auto", threads, cpus)
      assert.strictEqual(resolveDecodeThreads(undefined, threads, cpus), auto)
      assert.strictEqual(auto, threads < cpus ? threads : Math.max(1, threads - 1))
      assert.isAtLeast(auto, 1)
      assert.strictEqual(resolveDecodeThreads(count, threads, cpus), Math.min(count, threads))
    }
  )

  it("crosses the child's environment; absent, it is auto", () => {
    for (const decodeThreads of ["auto", 1, 3] as const) {
      assert.strictEqual(childSettingsFromEnv(childSettingsToEnv({ ...testChild, decodeThreads })).decodeThreads, decodeThreads)
    }
    const { NATIVEGEN_DECODE_THREADS: _, ...without } = childSettingsToEnv(testChild)
    assert.strictEqual(childSettingsFromEnv(without).decodeThreads, "auto")
  })

  it.live("a lone decode step runs at the decode threads, prefill and a batch of decode steps at the evaluation threads; greedy output equals one thread's", () =>
    Effect.gen(function*() {
      const cold = yield* Effect.scoped(Effect.gen(function*() {
        const { generations, prompt } = yield* build(1, 1)
        return yield* generate(generations, prompt, 0, false)
      }))
      yield* Effect.scoped(Effect.gen(function*() {
        const { context, generations, native, prompt } = yield* build(2, 1)
        assert.strictEqual(native.threads, 2)
        assert.strictEqual(native.decodeThreads, 1)
        // A prefill-only generation: its native calls are prefill chunks.
        yield* generate(generations, prompt, 1, true)
        assert.strictEqual(context.currentThreads, 2)
        const tokens = yield* generate(generations, prompt, 0, false)
        assert.strictEqual(context.currentThreads, 1)
        assert.deepStrictEqual(tokens, cold)
        assert.strictEqual(tokens.length, 12)
        // And back: the next prefill runs at the evaluation threads again.
        yield* generate(generations, [...prompt].reverse(), 1, true)
        assert.strictEqual(context.currentThreads, 2)
      }))
      // Two generations at once: their decode steps start together and are dispatched as one
      // native batch of two tokens, at the evaluation threads; each one's output is still its cold one.
      yield* Effect.scoped(Effect.gen(function*() {
        const { dispatchedAt, generations, native, prompt } = yield* build(2, 1)
        // Both sequences hold the prompt's prefill first, so the native batches below are decodes only.
        yield* generate(generations, prompt, 0, true)
        yield* generate(generations, prompt, 1, true)
        dispatchedAt.length = 0
        const before = native.counters()
        const [a, b] = yield* Effect.all([generate(generations, prompt, 0, false), generate(generations, prompt, 1, false)], { concurrency: 2 })
        assert.deepStrictEqual(a, cold)
        assert.deepStrictEqual(b, cold)
        const after = native.counters()
        // Some decode steps were batched together, and those batches ran at two threads.
        assert.isAbove(after.batchedSteps - before.batchedSteps, after.batches - before.batches)
        assert.include(dispatchedAt, 2)
        assert.isTrue(dispatchedAt.every((n) => n === 1 || n === 2))
      }))
    }), { timeout: 120_000 })
})
