/** A generation through the runtime's Provider, collected, and what the tests read from its chunks. */
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import type { GenerateChunk, GenerateRequest } from "../../src/domain/Inference.js"
import { Provider } from "../../src/services/Provider.js"

/** Every chunk of one generation. */
export const collect = (request: GenerateRequest) =>
  Effect.flatMap(Provider, (provider) => Effect.map(Stream.runCollect(provider.generate(request)), Chunk.toArray))

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
