/**
 * Timing one generation through a Provider, shared by the benchmarks (not a benchmark itself: an
 * underscore module is not run by bench/run.ts): a turn's Done chunk with its wall times, and the
 * arrival time of every streamed token.
 */
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import type { GenerateChunk, GenerateRequest } from "../src/domain/Inference.js"
import { Provider } from "../src/services/Provider.js"

export type Done = Extract<GenerateChunk, { _tag: "Done" }>

export interface Turn {
  readonly done: Done
  /** Wall clock from running the stream to its first Text chunk (undefined: no Text chunk). */
  readonly firstText: number | undefined
  readonly wall: number
  readonly answer: string
}

/** One generation through the runtime's Provider: its Done chunk, answer text and wall times. */
export const turn = (request: GenerateRequest) =>
  Effect.gen(function*() {
    const provider = yield* Provider
    let firstText: number | undefined
    let done: Done | undefined
    let answer = ""
    const start = performance.now()
    yield* Stream.runForEach(provider.generate(request), (chunk) =>
      Effect.sync(() => {
        if (chunk._tag === "Text") {
          firstText ??= performance.now() - start
          if (chunk.channel === "answer") answer += chunk.text
        } else if (chunk._tag === "Done") done = chunk
      }))
    if (done === undefined) return yield* Effect.dieMessage("generation ended without a Done chunk")
    return { done, firstText, wall: performance.now() - start, answer } satisfies Turn
  })

/** The arrival time (performance.now) of every token of a generation's stream, and the stream's reads. */
export const tokenArrivals = <E, R>(chunks: Stream.Stream<GenerateChunk, E, R>) =>
  Effect.gen(function*() {
    const arrivals: Array<number> = []
    let reads = 0
    yield* Stream.runForEachChunk(chunks, (read) =>
      Effect.sync(() => {
        reads++
        const t = performance.now()
        for (const chunk of read) if (chunk._tag === "Text") for (let i = 0; i < chunk.tokens.length; i++) arrivals.push(t)
      }))
    return { arrivals, reads }
  })
