/**
 * Running an Ollama generation on the Provider, through KeyedConversations: the output budget
 * when the client gives none, and the first chunk awaited before a stream's response starts, so
 * that a refusal (an invalid request, a prompt over the context, a full queue, an engine being
 * repaired) answers with its own status instead of a 200 stream that fails.
 */
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import type { GenerateChunk } from "../../domain/Inference.js"
import { ContextExceeded } from "../../services/AdmissionError.js"
import type { ProviderError } from "../../services/ProviderError.js"
import type { KeyedConversations } from "../KeyedConversations.js"
import type { Planned } from "./Requests.js"

/** More output than any context holds: the budget a request is first offered with when it gives none. */
const wholeContext = Number.MAX_SAFE_INTEGER

/**
 * The generation `planned` asks for. Without `num_predict` (Ollama's default: until the model
 * stops or the context is full) the budget is what the admitted context leaves after the prompt.
 * The prompt's length is known only once rendered (tools, thinking, a continued conversation), so
 * the request is first offered with more than the context: the Provider refuses it with a typed
 * ContextExceeded naming the prompt's tokens, before anything is queued or run, and it runs with
 * the rest. A prompt that leaves no room is refused for one token of output.
 */
export const generation = (
  conversations: KeyedConversations["Type"],
  key: string | undefined,
  planned: Planned
): Stream.Stream<GenerateChunk, ProviderError> => {
  if (planned.maxTokens !== undefined) return conversations.generate(key, { ...planned.request, maxTokens: planned.maxTokens })
  return conversations.generate(key, { ...planned.request, maxTokens: wholeContext }).pipe(
    Stream.catchTag("ContextExceeded", (exceeded) => {
      if (exceeded.outputTokens !== wholeContext) return Stream.fail(exceeded)
      const room = exceeded.admittedContext - exceeded.promptTokens
      return room > 0
        ? conversations.generate(key, { ...planned.request, maxTokens: room })
        : Stream.fail(
          new ContextExceeded({
            role: exceeded.role,
            promptTokens: exceeded.promptTokens,
            outputTokens: 1,
            admittedContext: exceeded.admittedContext
          })
        )
    })
  )
}

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
