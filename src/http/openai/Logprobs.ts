/**
 * Token probabilities as OpenAI reports them: natural logs of the engine's probabilities (under
 * the request's sampling), with each token's text and UTF-8 bytes; the chat API's per-token
 * entries with `top_logprobs`, and the legacy completions API's parallel arrays.
 */
import type { GenerateChunk, TokenCandidate } from "../../domain/Inference.js"

type Text = Extract<GenerateChunk, { readonly _tag: "Text" }>

/** OpenAI's floor for a probability of zero (JSON has no -Infinity). */
const FLOOR = -9999

export const logprobOf = (probability: number) => (probability > 0 ? Math.max(FLOOR, Math.log(probability)) : FLOOR)

const bytesOf = (text: string) => Array.from(Buffer.from(text, "utf8"))

/** The text of the chunk's i-th token (the engine gives each token's text with its probability). */
const tokenText = (chunk: Text, i: number) => chunk.tokenTexts?.[i] ?? ""

const candidateEntry = (candidate: TokenCandidate) => ({
  token: candidate.text,
  logprob: logprobOf(candidate.probability),
  bytes: bytesOf(candidate.text)
})

/** The chat API's `logprobs.content` entries for a Text chunk (none when it carries no probabilities). */
export const chatEntries = (chunk: Text) =>
  (chunk.probabilities ?? []).map((probability, i) => {
    const token = tokenText(chunk, i)
    return {
      token,
      logprob: logprobOf(probability),
      bytes: bytesOf(token),
      top_logprobs: (chunk.candidates?.[i] ?? []).map(candidateEntry)
    }
  })

export type ChatEntry = ReturnType<typeof chatEntries>[number]

/** The completions API's logprobs object, built over a generation's chunks. */
export interface CompletionLogprobs {
  readonly tokens: Array<string>
  readonly token_logprobs: Array<number>
  readonly top_logprobs: Array<Record<string, number>>
  readonly text_offset: Array<number>
}

export const emptyCompletionLogprobs = (): CompletionLogprobs => ({ tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] })

/**
 * Adds a Text chunk's tokens to `into`, the first at character offset `offset` of the completion
 * text; returns the offset after them.
 */
export const addCompletionEntries = (into: CompletionLogprobs, chunk: Text, offset: number): number => {
  let at = offset
  for (const [i, probability] of (chunk.probabilities ?? []).entries()) {
    const token = tokenText(chunk, i)
    into.tokens.push(token)
    into.token_logprobs.push(logprobOf(probability))
    into.top_logprobs.push(Object.fromEntries((chunk.candidates?.[i] ?? []).map((c) => [c.text, logprobOf(c.probability)])))
    into.text_offset.push(at)
    at += token.length
  }
  return at
}
