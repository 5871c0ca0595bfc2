/**
 * Prefix reuse: which part of a sequence's cached tokens a new prompt keeps. node-llama-cpp never
 * reuses a matching prefix by itself (`evaluate` appends), so the engine trims the sequence to the
 * kept prefix first. Keeping only whole prefill chunks makes the rest split into the same batches
 * as a cold run, so its probabilities are bit-identical.
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
