/**
 * The last generations that finished, for readiness's `recentGenerations`: a bounded ring (the
 * oldest dropped first) written once per generation, from its Done chunk, never per token.
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import type { GenerateChunk, GenerationSample, Lane } from "../../domain/Inference.js"

/** Finished generations kept. */
export const RECENT_GENERATIONS = 64

export interface RecentGenerations {
  /** Records a finished generation from its Done chunk, stamped with the clock's time. */
  readonly record: (lane: Lane, done: Extract<GenerateChunk, { readonly _tag: "Done" }>) => Effect.Effect<void>
  /** The kept samples, oldest first (a copy). */
  readonly list: () => ReadonlyArray<GenerationSample>
}

export const make = (capacity: number = RECENT_GENERATIONS): RecentGenerations => {
  const ring: Array<GenerationSample | undefined> = new Array(capacity)
  let next = 0
  let size = 0
  return {
    record: (lane, { stopReason, timings, usage }) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        ring[next] = {
          finishedAt: new Date(now).toISOString(),
          lane,
          stopReason,
          promptTokens: usage.promptTokens,
          reusedTokens: usage.reusedTokens,
          generatedTokens: usage.generatedTokens,
          reuse: usage.reuse,
          firstTokenMillis: timings.firstTokenMillis,
          decodeTokensPerSecond: timings.decodeTokensPerSecond,
          totalMillis: timings.totalMillis
        }
        next = (next + 1) % capacity
        size = Math.min(size + 1, capacity)
      }),
    list: () => Array.from({ length: size }, (_, i) => ring[(next - size + i + capacity) % capacity]!)
  }
}
