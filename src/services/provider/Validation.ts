/**
 * Request validation at the Provider's edge: every refusal is an InvalidRequest naming the field,
 * the value and the rule, before anything is rendered, queued or sent to the engine.
 */
import * as Effect from "effect/Effect"
import type { ChatMessage, GenerateRequest, ResponseFormat } from "../../domain/Inference.js"
import { ANY_JSON_OBJECT_SCHEMA, parseSupportedJsonSchema } from "../../domain/JsonSchemaSubset.js"
import { InvalidRequest } from "../ProviderError.js"

/** Most heads in one decision request, and most stop strings in one generation. */
export const MAX_HEADS = 16
export const MAX_STOP_STRINGS = 16

export const invalid = (field: string, value: unknown, reason: string) =>
  new InvalidRequest({ field, value: JSON.stringify(value) ?? String(value), reason })

export const validateMessages = (messages: ReadonlyArray<ChatMessage>) =>
  messages.length === 0 ? Effect.fail(invalid("messages", messages, "at least one message is needed")) : Effect.void

export const validateGenerate = (request: GenerateRequest) =>
  Effect.gen(function*() {
    yield* validateMessages(request.messages)
    if (!Number.isSafeInteger(request.maxTokens) || request.maxTokens <= 0) {
      return yield* invalid("maxTokens", request.maxTokens, "must be a positive integer")
    }
    const stop = request.stop ?? []
    if (stop.length > MAX_STOP_STRINGS) return yield* invalid("stop", stop.length, `at most ${MAX_STOP_STRINGS} stop strings`)
    const empty = stop.find((s) => s.length === 0)
    if (empty !== undefined) return yield* invalid("stop", empty, "a stop string must not be empty")
    const sampling = request.sampling
    if (sampling !== undefined) {
      if (!(sampling.temperature >= 0) || !Number.isFinite(sampling.temperature)) {
        return yield* invalid("sampling.temperature", sampling.temperature, "must be a finite number >= 0")
      }
      if (sampling.topK !== undefined && sampling.topK < 0) return yield* invalid("sampling.topK", sampling.topK, "must be >= 0")
      if (sampling.topP !== undefined && !(sampling.topP > 0 && sampling.topP <= 1)) {
        return yield* invalid("sampling.topP", sampling.topP, "must be in (0, 1]")
      }
    }
    if (request.conversation !== undefined && (request.conversation.length === 0 || request.conversation.length > 256)) {
      return yield* invalid("conversation", request.conversation, "must be 1 to 256 characters")
    }
  })


/**
 * The JSON schema (as its JSON text, the engine's grammar cache key) a response format decodes
 * under; a schema the grammar cannot express exactly is refused, naming the part.
 */
export const jsonSchemaOf = (format: ResponseFormat) => {
  if (format.type === "json") return Effect.succeed(JSON.stringify(ANY_JSON_OBJECT_SCHEMA))
  const check = parseSupportedJsonSchema(format.schema)
  return check._tag === "Supported"
    ? Effect.succeed(JSON.stringify(check.schema))
    : Effect.fail(invalid(`responseFormat.schema${check.path}`, check.value, check.reason))
}
