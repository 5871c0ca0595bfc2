/**
 * Running an Ollama generation on the Provider, through KeyedConversations: the client's output
 * budget or none (the rest of the context), and the first chunk awaited before a stream's
 * response starts, so that a refusal (an invalid request, a prompt over the context, a full
 * queue, an engine being repaired) answers with its own status instead of a 200 stream that fails.
 */
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import type { GenerateChunk } from "../../domain/Inference.js"
import type { ProviderError } from "../../services/ProviderError.js"
import type { KeyedConversations } from "../KeyedConversations.js"
import type { Planned } from "./Requests.js"

/**
 * The generation `planned` asks for. Without `num_predict` (Ollama's default: until the model
 * stops or the context is full) the request gives no maxTokens: the Provider's budget is then
 * what the admitted context leaves after the rendered prompt, and a prompt that fills the context
 * alone is refused with ContextExceeded naming its tokens, before anything is queued or run.
 */
export const generation = (
  conversations: KeyedConversations["Type"],
  key: string | undefined,
  planned: Planned
): Stream.Stream<GenerateChunk, ProviderError> =>
  conversations.generate(key, planned.maxTokens === undefined ? planned.request : { ...planned.request, maxTokens: planned.maxTokens })

/**
 * Starts `stream` in the current scope (the request's, which lasts until the response is sent)
 * and waits for its first elements: it fails as the stream fails before any output, else gives
 * the whole stream (the elements already pulled, then the rest).
 */
export const started = <A, E>(stream: Stream.Stream<A, E>): Effect.Effect<Stream.Stream<A, E>, E, Scope.Scope> =>
  Effect.gen(function*() {
    const pull = yield* Stream.toPull(stream)
    const rest = Stream.repeatEffectChunkOption(pull)
    for (;;) {
      const first = yield* Effect.either(pull)
      if (Either.isLeft(first)) {
        return Option.isSome(first.left) ? yield* Effect.fail(first.left.value) : Stream.empty
      }
      if (Chunk.isNonEmpty(first.right)) return Stream.concat(Stream.fromChunk(first.right), rest)
    }
  })
