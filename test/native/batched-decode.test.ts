/**
 * Batched decode: the decode steps of concurrent generations that are ready at the same step
 * boundary run as one native evaluation (node-llama-cpp's counted dispatches, against the tokens
 * decoded), greedy output equals each generation's solo run, a decision submitted while a batch
 * runs is served at the next boundary, and a generation cancelled mid-batch leaves the others'
 * output as it would have been; with batching off (NATIVEGEN_BATCH_DECODE=0) each token is its own
 * evaluation and probabilities are bit-identical to the solo runs. In process, composed as Engine.make composes them, on the tiny
 * model (1 thread, small contexts), real inference.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Stream from "effect/Stream"
import { ensureModel } from "../../fixtures/models.js"
import * as Generation from "../../src/native/engine/Generation.js"
import * as Llama from "../../src/native/engine/Llama.js"
import * as Residents from "../../src/native/engine/Residents.js"
import * as Scoring from "../../src/native/engine/Scoring.js"

const texts = ["hello there", "the quick brown fox", "once upon a time in a land", "a b c d e f"]
const maxTokens = 16

const buildWith = (batchDecode: boolean) => Effect.gen(function*() {
  const native = yield* Llama.make({ backend: "cpu", threads: 1, batchSize: 64, batchDecode })
  const residents = yield* Residents.make(native, undefined)
  const generations = yield* Generation.make(native, residents, undefined)
  const scoring = yield* Scoring.make(native, residents, undefined)
  yield* Stream.runDrain(residents.load("generation", ensureModel("tiny"), 256, texts.length))
  yield* Stream.runDrain(residents.load("decision", ensureModel("decision"), 256, 1))
  const prompts = yield* Effect.forEach(texts, (text) => residents.tokenize("generation", text, false))
  return { native, generations, scoring, prompts }
})
const build = buildWith(true)

type Built = Effect.Effect.Success<typeof build>

let ids = 0
/** Begins a greedy generation of `prompt` on `sequence`, prefilled cold (nothing reused). */
const begin = ({ generations }: Built, sequence: number, prompt: ReadonlyArray<number>) =>
  Effect.gen(function*() {
    const generationId = `g${++ids}`
    yield* generations.begin({
      generationId,
      lane: "foreground",
      sequence,
      prompt,
      sampling: { temperature: 0 },
      maxTokens,
      stopTokens: [],
      prefillChunk: 64,
      confidence: true
    })
    return generationId
  })

/** The generation's decoded tokens (and their confidences), then ends it. */
const run = (built: Built, generationId: string, take = maxTokens) =>
  built.generations.advance(generationId, 0).pipe(
    Stream.filter((e) => e._tag === "Token"),
    Stream.take(take),
    Stream.runCollect,
    Effect.map((events) => Chunk.toArray(events).map((e) => ({ token: e.token, confidence: e.confidence ?? NaN }))),
    Effect.ensuring(built.generations.end(generationId))
  )

/** Each prompt's generation alone on its sequence, one after another. */
const solos = (built: Built) =>
  Effect.forEach(built.prompts, (prompt, i) => Effect.flatMap(begin(built, i, prompt), (id) => run(built, id)))

describe("batched decode", () => {
  it.scoped("concurrent generations decode in one native batch per step, each token equal to its solo run", () =>
    Effect.gen(function*() {
      const built = yield* build
      const alone = yield* solos(built)
      const ids = yield* Effect.forEach(built.prompts, (prompt, i) => begin(built, i, prompt))
      const before = built.native.counters()
      const together = yield* Effect.forEach(ids, (id) => run(built, id), { concurrency: "unbounded" })
      const after = built.native.counters()
      assert.deepStrictEqual(
        together.map((tokens) => tokens.map((t) => t.token)),
        alone.map((tokens) => tokens.map((t) => t.token)),
        "greedy output in a batch differs from the solo runs"
      )
      const decoded = together.reduce((n, tokens) => n + tokens.length, 0)
      const nativeBatches = after.nativeBatches - before.nativeBatches
      const batchedSteps = after.batchedSteps - before.batchedSteps
      // Four generations ran: the native side evaluated several tokens per dispatch, one dispatch
      // per batch of the gate, and every decode step went through those batches.
      assert.isAtMost(nativeBatches * 2, decoded, `${nativeBatches} native evaluations for ${decoded} tokens`)
      assert.isAtMost(nativeBatches, after.batches - before.batches)
      assert.isAtLeast(batchedSteps, decoded)
      // Batch composition changes the float sums, not the greedy choice: confidences stay close.
      const drift = Math.max(...together.flatMap((tokens, i) => tokens.map((t, k) => Math.abs(t.confidence - alone[i]![k]!.confidence))))
      assert.isBelow(drift, 1e-2)
    }))

  it.scoped("a decision submitted while a batch runs is served at the next step boundary", () =>
    Effect.gen(function*() {
      const built = yield* build
      const ids = yield* Effect.forEach(built.prompts, (prompt, i) => begin(built, i, prompt))
      const decoding = yield* Deferred.make<void>()
      const fibers = yield* Effect.forEach(ids, (id) =>
        built.generations.advance(id, 0).pipe(
          Stream.filter((e) => e._tag === "Token"),
          Stream.tap((e) => (e.index === 2 ? Deferred.succeed(decoding, undefined) : Effect.void)),
          Stream.runCount,
          Effect.fork
        ))
      yield* Deferred.await(decoding)
      const submitted = built.native.counters().batches
      const scored = yield* built.scoring.score([5, 6, 7], [{ name: "answer", labels: ["yes", "no"] }], 64).pipe(
        Stream.runCollect,
        Effect.map(() => built.native.counters().batches)
      )
      // At most the batch that was running when it came: served at the next boundary.
      assert.isAtMost(scored - submitted, 1)
      const counts = yield* Effect.forEach(fibers, Fiber.join)
      assert.deepStrictEqual(counts, counts.map(() => maxTokens), "the generations did not all finish")
      assert.isBelow(submitted, built.native.counters().batches - 1, "the decision came after the generations ended")
    }))

  it.scoped("a generation cancelled mid-batch leaves the others' output as their solo runs", () =>
    Effect.gen(function*() {
      const built = yield* build
      const alone = yield* solos(built)
      const ids = yield* Effect.forEach(built.prompts, (prompt, i) => begin(built, i, prompt))
      // The first generation is cancelled after three tokens (its stream interrupted, then ended).
      const outputs = yield* Effect.forEach(ids, (id, i) => run(built, id, i === 0 ? 3 : maxTokens), { concurrency: "unbounded" })
      assert.deepStrictEqual(outputs[0]!.map((t) => t.token), alone[0]!.slice(0, 3).map((t) => t.token))
      assert.deepStrictEqual(
        outputs.slice(1).map((tokens) => tokens.map((t) => t.token)),
        alone.slice(1).map((tokens) => tokens.map((t) => t.token))
      )
    }))

  it.scoped("with batching off, each decode step is its own native evaluation and probabilities equal the solo runs bit for bit", () =>
    Effect.gen(function*() {
      const built = yield* buildWith(false)
      const alone = yield* solos(built)
      const ids = yield* Effect.forEach(built.prompts, (prompt, i) => begin(built, i, prompt))
      const before = built.native.counters()
      const together = yield* Effect.forEach(ids, (id) => run(built, id), { concurrency: "unbounded" })
      const after = built.native.counters()
      assert.deepStrictEqual(together, alone)
      const decoded = together.reduce((n, tokens) => n + tokens.length, 0)
      assert.strictEqual(after.nativeBatches - before.nativeBatches, decoded)
      assert.strictEqual(after.batches, 0)
    }))
})
