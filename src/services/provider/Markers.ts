/**
 * The channel markers of a generation model, from its own vocabulary: a marker text (`<think>`,
 * `</think>`, `<tool_call>`, `</tool_call>`) is a marker when the model's tokenizer, parsing
 * special tokens, reads it as exactly one token; otherwise the model lacks that marker (null).
 * This covers control tokens and user-defined added tokens alike: Qwen3's `<think>` is an added
 * token that is not "special" (llama.cpp types it user-defined, and it detokenizes to its text
 * even without special tokens), yet it is the marker the model emits.
 *
 * Resolved once per loaded model (the engine incarnation and model path), never per request.
 */
import * as Effect from "effect/Effect"
import { type ChannelTokens, Marker, markerText } from "../ChannelDecoder.js"

/** Tokenizes with special-token parsing, through the model whose markers are wanted. */
export type Tokenize<E> = (text: string) => Effect.Effect<ReadonlyArray<number>, E>

/** The model's marker ids: each marker text that is one token, else null. */
export const resolve = <E>(tokenize: Tokenize<E>): Effect.Effect<ChannelTokens, E> =>
  Effect.map(
    Effect.forEach(Marker.literals, (marker) =>
      Effect.map(tokenize(markerText[marker]), (tokens) => [marker, tokens.length === 1 ? tokens[0]! : null] as const)),
    (entries) => Object.fromEntries(entries) as Record<Marker, number | null> satisfies ChannelTokens
  )

/**
 * Remembers the markers of the last model asked for: a new key (another incarnation or model)
 * resolves again. Concurrent first requests may both resolve; they find the same ids.
 */
export const cache = () => {
  let last: { readonly key: string; readonly tokens: ChannelTokens } | undefined
  return <E>(key: string, tokenize: Tokenize<E>): Effect.Effect<ChannelTokens, E> =>
    Effect.suspend(() =>
      last !== undefined && last.key === key
        ? Effect.succeed(last.tokens)
        : Effect.tap(resolve(tokenize), (tokens) => Effect.sync(() => (last = { key, tokens })))
    )
}
