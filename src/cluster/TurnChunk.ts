/**
 * A chunk of a turn with its place in the turn: the turn's id, the chunk's ordinal and the ordinal
 * of its first generated token, stamped by the runner that serves the turn (conversation turns and
 * one-offs alike), so that the entry runner can prove that what it passes on is one unbroken
 * stream (RoutedTurn's `exactlyOnce`).
 *
 * A turn whose runner was lost after chunks were delivered is resumed where it is deterministic
 * (greedy, or seeded): the entry sends it again with what it delivered (`TurnResume`), and the new
 * runner runs it again from its start, checks that its first chunks are exactly the delivered ones,
 * drops them, and stamps the rest as the stream's continuation. A re-run that differs fails with
 * `GenerationFailed` naming the delivered tokens: nothing is delivered twice, skipped or changed.
 */
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import { GenerationFailed } from "../domain/EngineError.js"
import { GenerateChunk, type GenerateRequest } from "../domain/Inference.js"

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

/** What the entry already delivered of a turn it sends again: its first `chunks` chunks, carrying `tokens`. */
export const TurnResume = Schema.Struct({
  chunks: Schema.NonNegativeInt,
  tokens: Schema.Array(Schema.Int)
})
export type TurnResume = typeof TurnResume.Type

/**
 * Whether a run of `request` again from its start gives the same chunks: greedy sampling (the
 * default), or a seed. Only such a turn is resumed after its runner is lost.
 */
export const resumable = (request: GenerateRequest): boolean =>
  request.sampling === undefined || request.sampling.temperature === 0 || request.sampling.seed !== undefined

/**
 * How chunk `index` of a re-run differs from what was delivered (its tokens, or the count of tokens
 * up to the last delivered chunk); undefined where it matches. The chunks are a function of the
 * tokens (Output.ts), so equal tokens mean equal text, channels and tool calls.
 */
const divergence = (chunk: GenerateChunk, index: number, seq: number, resume: TurnResume): string | undefined => {
  if (chunk._tag === "Done") return `it ended at chunk ${index}, before the ${resume.chunks} delivered`
  const tokens = chunk.tokens
  for (let i = 0; i < tokens.length; i++) {
    const delivered = resume.tokens[seq + i]
    if (delivered !== tokens[i]) {
      return delivered === undefined
        ? `chunk ${index} runs past the ${resume.tokens.length} delivered tokens`
        : `token ${seq + i} is ${tokens[i]}, not the delivered ${delivered}`
    }
  }
  const end = seq + tokens.length
  return index === resume.chunks - 1 && end !== resume.tokens.length
    ? `its first ${resume.chunks} chunks carry ${end} tokens, not the ${resume.tokens.length} delivered`
    : undefined
}

/**
 * Stamps the chunks of a turn that resumes after `resume` (none: from its start, `stamp`). The
 * re-run's first `resume.chunks` chunks must carry exactly the delivered tokens: they are dropped,
 * and the rest are numbered on (index from `resume.chunks`, seq from the delivered tokens). A re-run
 * that differs fails with GenerationFailed naming the delivered tokens before anything is sent.
 */
export const stampResumed = (turn: string, resume: TurnResume | undefined) =>
<E, R>(chunks: Stream.Stream<GenerateChunk, E, R>): Stream.Stream<TurnChunk, E | GenerationFailed, R> =>
  resume === undefined || resume.chunks === 0 ? stamp(turn)(chunks) : Stream.suspend(() => {
    let index = 0
    let seq = 0
    return Stream.mapChunksEffect(chunks, (batch) => {
      const out: Array<TurnChunk> = []
      for (const chunk of batch) {
        if (index < resume.chunks) {
          const differs = divergence(chunk, index, seq, resume)
          if (differs !== undefined) {
            return Effect.fail(
              new GenerationFailed({
                deliveredTokens: resume.tokens.length,
                reason: `turn ${turn} was resumed after its runner was lost, but its re-run differs from what was ` +
                  `delivered (${differs}); the turn was stopped`
              })
            )
          }
        } else {
          out.push({ turn, index, seq, chunk })
        }
        index++
        seq += tokenCount(chunk)
      }
      return Effect.succeed(Chunk.unsafeFromArray(out))
    }).pipe(
      // A batch wholly dropped sends nothing (no empty push while the delivered part is re-run).
      Stream.chunks,
      Stream.filter(Chunk.isNonEmpty),
      Stream.flattenChunks
    )
  })
