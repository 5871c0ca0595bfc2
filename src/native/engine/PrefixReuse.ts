/**
 * Prefix reuse: which part of a sequence's cached tokens a new prompt keeps. node-llama-cpp never
 * reuses a matching prefix by itself (`evaluate` appends), so the engine trims the sequence to the
 * kept prefix first. Keeping only whole prefill chunks makes the rest split into the same batches
 * as a cold run, so its probabilities are bit-identical. So does keeping a whole prefill that was
 * itself split as a cold run splits it and ended where the new prompt's prefill ends (a repeated
 * prompt): every batch of it is the cold run's.
 */

/** Length of the common prefix of two token lists. */
export const commonPrefix = (a: ReadonlyArray<number>, b: ReadonlyArray<number>) => {
  let n = 0
  while (n < a.length && n < b.length && a[n] === b[n]) n++
  return n
}

/** The longest prefix of `tokens` that is cached and ends on the grid of multiples of `chunk`. */
export const wholeChunksCached = <T extends number>(cached: ReadonlyArray<number>, tokens: Array<T>, chunk: number) =>
  tokens.slice(0, Math.floor(commonPrefix(cached, tokens) / chunk) * chunk)

/** Where a sequence's cached prefill ended, when it was split on the grid of `chunk` as a cold run splits it. */
export interface ColdSplit {
  readonly end: number
  readonly chunk: number
}

/**
 * The prefix of `tokens` (a prefill, evaluated before sampling) to keep: all of it when the cache
 * holds it as a cold split ending exactly at its end on the same grid (the same batches a cold run
 * of `tokens` makes), else the whole chunks cached.
 */
export const keptOnGrid = <T extends number>(
  cached: ReadonlyArray<number>,
  tokens: Array<T>,
  chunk: number,
  split: ColdSplit | undefined
): Array<T> =>
  split !== undefined && split.chunk === chunk && split.end === tokens.length && tokens.length > 0 &&
    commonPrefix(cached, tokens) >= tokens.length
    ? tokens
    : wholeChunksCached(cached, tokens, chunk)
