/**
 * A generation through the runtime's Provider, collected, and what the tests read from its chunks;
 * the typed failure of a refused call.
 */
import { assert } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import type { GenerateChunk, GenerateRequest } from "../../src/domain/Inference.js"
import { Provider } from "../../src/services/Provider.js"

/** Every chunk of one generation through `provider` (a cluster runner's client, say). */
export const collectFrom = (provider: Provider["Type"], request: GenerateRequest) =>
  Effect.map(Stream.runCollect(provider.generate(request)), Chunk.toArray)

/** Every chunk of one generation. */
export const collect = (request: GenerateRequest) => Effect.flatMap(Provider, (provider) => collectFrom(provider, request))

/** The Done chunk, which must be the last. */
export const doneOf = (chunks: ReadonlyArray<GenerateChunk>) => {
  const last = chunks.at(-1)
  if (last?._tag !== "Done") throw new Error("the last chunk is not Done")
  return last
}

/** The generated tokens of the Text chunks. */
export const tokensOf = (chunks: ReadonlyArray<GenerateChunk>) => chunks.flatMap((c) => (c._tag === "Text" ? c.tokens : []))

/** The tokens' probabilities, where the request asked for them. */
export const probabilitiesOf = (chunks: ReadonlyArray<GenerateChunk>) =>
  chunks.flatMap((c) => (c._tag === "Text" ? c.probabilities ?? [] : []))

/** The text of one channel. */
export const textOf = (chunks: ReadonlyArray<GenerateChunk>, channel: "thought" | "answer" | "tool") =>
  chunks.map((c) => (c._tag === "Text" && c.channel === channel ? c.text : "")).join("")

/** The answer channel's text. */
export const answerOf = (chunks: ReadonlyArray<GenerateChunk>) => textOf(chunks, "answer")

/** The typed failure of `effect`, which must fail (not die, not succeed). */
export const failureOf = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.map(Effect.exit(effect), (exit) => {
    assert(Exit.isFailure(exit), "expected a failure")
    assert.isFalse(Cause.isDie(exit.cause), `a defect: ${Cause.pretty(exit.cause)}`)
    return Option.getOrThrowWith(Cause.failureOption(exit.cause), () => new Error(`not a typed failure: ${Cause.pretty(exit.cause)}`))
  })
