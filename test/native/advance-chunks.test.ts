/**
 * How a generation's decode steps leave the engine (each chunk of the Advance stream is one
 * message to the host): a reader that falls behind gets every token ready in one chunk, a reader
 * that keeps up gets the first token alone as soon as it is decoded and the next ones in chunks of
 * several (DECODE_MESSAGE_TOKENS, or what a DECODE_MESSAGE_INTERVAL_MS brought), and whatever the
 * chunking, indices are exact and a pause in the middle of a chunk replays exactly the tokens the
 * reader did not take.
 * In process, as Engine.make composes the engine, on the tiny model (1 thread, a small context).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import { ensureModel } from "../../fixtures/models.js"
import { type AdvanceEvent, DECODE_MESSAGE_TOKENS } from "../../src/native/Protocol.js"
import * as Generation from "../../src/native/engine/Generation.js"
import * as Llama from "../../src/native/engine/Llama.js"
import * as Residents from "../../src/native/engine/Residents.js"

const MAX_TOKENS = 24

/** The llama, the tiny model resident with two sequences, and generations, in the current scope. */
const build = Effect.gen(function*() {
  const native = yield* Llama.make({ backend: "cpu", threads: 1, batchSize: 64 })
  const residents = yield* Residents.make(native, undefined)
  const generations = yield* Generation.make(native, residents, undefined)
  yield* Stream.runDrain(residents.load("generation", ensureModel("tiny"), 256, 2))
  const prompt = yield* residents.tokenize("generation", "once upon a time", false)
  return { generations, prompt }
})

const begin = (
  generations: Generation.Generations,
  generationId: string,
  prompt: ReadonlyArray<number>,
  sequence = 0,
  maxTokens = MAX_TOKENS
) =>
  generations.begin({
    generationId,
    lane: "foreground",
    sequence,
    prompt,
    sampling: { temperature: 0 },
    maxTokens,
    prefillChunk: 64
  })

type TokenEvent = Extract<AdvanceEvent, { readonly _tag: "Token" }>
const tokensIn = (events: Iterable<AdvanceEvent>): Array<TokenEvent> =>
  Array.from(events).filter((e): e is TokenEvent => e._tag === "Token")

/** A cold run's tokens, on sequence 0 (ended afterwards). */
const coldTokens = (generations: Generation.Generations, prompt: ReadonlyArray<number>) =>
  Effect.gen(function*() {
    yield* begin(generations, "cold", prompt)
    const events = yield* Stream.runCollect(generations.advance("cold", 0))
    yield* generations.end("cold")
    return tokensIn(events).map((e) => e.token)
  })

/** Pulls chunks until one holds a token; the chunks pulled. */
const pullUntilToken = <E>(pull: Effect.Effect<Chunk.Chunk<AdvanceEvent>, Option.Option<E>>) =>
  Effect.gen(function*() {
    const chunks: Array<ReadonlyArray<AdvanceEvent>> = []
    for (;;) {
      const chunk = Chunk.toReadonlyArray(yield* pull)
      chunks.push(chunk)
      if (tokensIn(chunk).length > 0) return chunks
    }
  })

/** The rest of a pulled stream, chunk by chunk. */
const pullRest = <E>(pull: Effect.Effect<Chunk.Chunk<AdvanceEvent>, Option.Option<E>>) =>
  Effect.gen(function*() {
    const chunks: Array<ReadonlyArray<AdvanceEvent>> = []
    for (;;) {
      const next = yield* Effect.either(pull)
      if (next._tag === "Left") {
        if (Option.isSome(next.left)) return yield* Effect.fail(next.left.value)
        return chunks
      }
      chunks.push(Chunk.toReadonlyArray(next.right))
    }
  })

/**
 * Lets `slow` run ahead unread: another generation on sequence 1 takes `steps` decode steps in
 * the same lane, which the step gate interleaves with slow's run-ahead steps.
 */
const otherSteps = (generations: Generation.Generations, prompt: ReadonlyArray<number>, steps: number) =>
  Effect.gen(function*() {
    yield* begin(generations, "other", prompt, 1)
    yield* generations.advance("other", 0).pipe(Stream.filter((e) => e._tag === "Token"), Stream.take(steps), Stream.runDrain)
    yield* generations.end("other")
  })

describe("advance chunks", () => {
  it.scoped("a reader that falls behind gets the tokens ready in one chunk, in order, each index once", () =>
    Effect.gen(function*() {
      const { generations, prompt } = yield* build
      const cold = yield* coldTokens(generations, prompt)
      yield* begin(generations, "slow", prompt)
      const pull = yield* Stream.toPull(generations.advance("slow", 0))
      const first = yield* pullUntilToken(pull)
      yield* otherSteps(generations, prompt, 6)
      const rest = yield* pullRest(pull)
      const behind = tokensIn(rest[0]!)
      assert.isAtLeast(behind.length, 2, `the chunk after falling behind: ${JSON.stringify(rest[0])}`)
      const tokens = tokensIn([...first, ...rest].flat())
      assert.deepStrictEqual(tokens.map((e) => e.index), cold.map((_, i) => i))
      assert.deepStrictEqual(tokens.map((e) => e.token), cold)
      assert.strictEqual(rest.flat().at(-1)?._tag, "Finished")
    }))

  it.scoped("a reader that keeps up gets the first token alone, as soon as it is decoded", () =>
    Effect.gen(function*() {
      const { generations, prompt } = yield* build
      yield* begin(generations, "fast", prompt)
      const pull = yield* Stream.toPull(generations.advance("fast", 0))
      const chunks = yield* pullUntilToken(pull)
      assert.deepStrictEqual(tokensIn(chunks.at(-1)!).map((e) => e.index), [0])
    }))

  it.scoped("a reader that keeps up gets the tokens after the first in chunks of several, the end at once", () =>
    Effect.gen(function*() {
      const { generations, prompt } = yield* build
      const cold = yield* coldTokens(generations, prompt)
      yield* begin(generations, "steady", prompt)
      const pull = yield* Stream.toPull(generations.advance("steady", 0))
      const first = yield* pullUntilToken(pull)
      const rest = yield* pullRest(pull)
      const sizes = rest.map((chunk) => tokensIn(chunk).length).filter((n) => n > 0)
      // The tiny model decodes a token in far less than the interval: chunks fill to the size.
      assert.isAtMost(sizes.length, Math.ceil((cold.length - 1) / DECODE_MESSAGE_TOKENS) + 1, `token chunk sizes ${JSON.stringify(sizes)}`)
      const tokens = tokensIn([...first, ...rest].flat())
      assert.deepStrictEqual(tokens.map((e) => e.token), cold)
      assert.strictEqual(rest.flat().at(-1)?._tag, "Finished")
    }))

  it.scoped("a pause in the middle of a chunk replays exactly the tokens not taken, then goes on", () =>
    Effect.gen(function*() {
      const { generations, prompt } = yield* build
      const cold = yield* coldTokens(generations, prompt)
      yield* begin(generations, "paused", prompt)
      const scope = yield* Scope.make()
      const pull = yield* Scope.extend(Stream.toPull(generations.advance("paused", 0)), scope)
      const first = tokensIn((yield* pullUntilToken(pull)).flat())
      yield* otherSteps(generations, prompt, 6)
      const batch = tokensIn(Chunk.toReadonlyArray(yield* pull))
      assert.isAtLeast(batch.length, 2, "a chunk of several tokens")
      // The reader takes the first token of that chunk only, then pauses (its stream is closed).
      const taken = [...first, batch[0]!]
      yield* Scope.close(scope, Exit.void)
      const resumed = tokensIn(yield* Stream.runCollect(generations.advance("paused", taken.length)))
      assert.strictEqual(resumed[0]?.index, taken.length)
      const all = [...taken, ...resumed]
      assert.deepStrictEqual(all.map((e) => e.index), cold.map((_, i) => i))
      assert.deepStrictEqual(all.map((e) => e.token), cold)
    }))

  it.scoped("the token that reaches max tokens leaves with Finished, in one chunk", () =>
    Effect.gen(function*() {
      const { generations, prompt } = yield* build
      yield* begin(generations, "one", prompt, 0, 1)
      const chunks = Chunk.toReadonlyArray(yield* Stream.runCollect(Stream.chunks(generations.advance("one", 0))))
      const decoded = chunks.map((c) => Chunk.toReadonlyArray(c).map((e) => e._tag)).filter((tags) => !tags.includes("Prefilled"))
      assert.deepStrictEqual(decoded, [["Token", "Finished"]])
    }))

  it.scoped("Begin with the first Advance: Started, with the reused tokens, leaves in the first step's message", () =>
    Effect.gen(function*() {
      const { generations, prompt } = yield* build
      const cold = yield* coldTokens(generations, prompt)
      const request = { generationId: "started", lane: "foreground", sequence: 0, prompt, sampling: { temperature: 0 }, maxTokens: MAX_TOKENS, prefillChunk: 64 } as const
      const chunks = Chunk.toReadonlyArray(yield* Stream.runCollect(Stream.chunks(generations.start(request))))
      const first = Chunk.toReadonlyArray(chunks[0]!)
      // The cold run left the prompt's prefill in the sequence: a repeated prompt keeps it.
      assert.deepStrictEqual(first[0], { _tag: "Started", reusedTokens: prompt.length - 1 })
      assert.isAtLeast(first.length, 2, "Started shares its message with the first step")
      const events = chunks.flatMap((c) => Chunk.toReadonlyArray(c))
      assert.deepStrictEqual(events.filter((e) => e._tag === "Started").length, 1)
      assert.deepStrictEqual(tokensIn(events.filter((e) => e._tag !== "Started") as Array<AdvanceEvent>).map((e) => e.token), cold)
    }))

  it.scoped("a Begin that fails fails its Advance with the same typed error", () =>
    Effect.gen(function*() {
      const { generations, prompt } = yield* build
      const request = { generationId: "refused", prompt, sampling: { temperature: 0 }, maxTokens: 0, prefillChunk: 64 }
      const refusal = yield* Effect.flip(generations.begin({ ...request, generationId: "refused-alone" }))
      assert.strictEqual(refusal._tag, "InvalidEngineRequest")
      const exit = yield* Effect.exit(Stream.runCollect(generations.start(request)))
      assert.deepStrictEqual(exit, Exit.fail(refusal))
    }))
})
