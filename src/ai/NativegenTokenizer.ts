/**
 * @effect/ai's `Tokenizer` over a nativegen `Provider`: a prompt's exact tokens as the generation
 * model sees them, rendered through its own chat template with the assistant prompt (the count
 * `Provider.count` gives for the same messages). `truncate` is @effect/ai's, over these tokens.
 */
import * as Tokenizer from "@effect/ai/Tokenizer"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { Provider } from "../services/Provider.js"
import { toAiError } from "./Errors.js"
import * as Messages from "./Messages.js"

export const make = Effect.map(Provider, (provider) =>
  Tokenizer.make({
    tokenize: (prompt) =>
      Messages.fromPrompt(prompt, { module: "NativegenTokenizer", method: "tokenize" }).pipe(
        Effect.flatMap((messages) => Effect.mapError(provider.tokenize({ messages }), toAiError("NativegenTokenizer", "tokenize"))),
        Effect.map(({ tokens }) => [...tokens]),
        Effect.withSpan("NativegenTokenizer.tokenize")
      )
  }))

/** `Tokenizer` over the `Provider` in context. */
export const layer: Layer.Layer<Tokenizer.Tokenizer, never, Provider> = Layer.effect(Tokenizer.Tokenizer, make)
