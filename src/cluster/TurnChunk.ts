/**
 * A chunk of a turn with its place in the turn: the turn's id, the chunk's ordinal and the ordinal
 * of its first generated token, stamped by the runner that serves the turn (conversation turns and
 * one-offs alike), so that the entry runner can prove that what it passes on is one unbroken
 * stream (RoutingProvider's `exactlyOnce`).
 */
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import { GenerateChunk } from "../domain/Inference.js"

/** One chunk of a turn with its place in the turn. */
export const TurnChunk = Schema.Struct({
  /** The turn's id (made by the entry runner). */
  turn: Schema.String,
  /** The chunk's ordinal in the turn, from 0. */
  index: Schema.NonNegativeInt,
  /** The ordinal of the chunk's first generated token in the turn, from 0 (tokens before it: `seq`). */
  seq: Schema.NonNegativeInt,
  chunk: GenerateChunk
})
export type TurnChunk = typeof TurnChunk.Type

/** The generated tokens a chunk carries. */
export const tokenCount = (chunk: GenerateChunk): number => chunk._tag === "Done" ? 0 : chunk.tokens.length

/** Stamps a turn's chunks with their index and first token's seq. */
export const stamp = (turn: string) => <E, R>(chunks: Stream.Stream<GenerateChunk, E, R>): Stream.Stream<TurnChunk, E, R> =>
  Stream.mapAccum(chunks, { index: 0, seq: 0 }, (at, chunk) => [
    { index: at.index + 1, seq: at.seq + tokenCount(chunk) },
    { turn, index: at.index, seq: at.seq, chunk }
  ])
