/**
 * Request validation at the Provider's edge: every refusal is an InvalidRequest naming the field,
 * the value and the rule, before anything is rendered, queued or sent to the engine.
 */
import * as Effect from "effect/Effect"
import type { ChatMessage, GenerateRequest, ResponseFormat, ToolDefinition } from "../../domain/Inference.js"
import { ANY_JSON_OBJECT_SCHEMA, parseSupportedJsonSchema } from "../../domain/JsonSchemaSubset.js"
import { InvalidRequest } from "../ProviderError.js"

/** Most heads in one decision request, and most stop strings in one generation. */
export const MAX_HEADS = 16
export const MAX_STOP_STRINGS = 16
/**
 * Most tools in one generation, and most bytes of their JSON (names, descriptions, schemas): the
 * template writes all of them into every prompt.
 */
export const MAX_TOOLS = 64
export const MAX_TOOLS_BYTES = 64 * 1024
/** A tool name as OpenAI-style APIs accept it (and as it can be written into a template unquoted). */
export const TOOL_NAME = /^[A-Za-z0-9_.-]{1,64}$/

export const invalid = (field: string, value: unknown, reason: string) =>
  new InvalidRequest({ field, value: JSON.stringify(value) ?? String(value), reason })

export const validateMessages = (messages: ReadonlyArray<ChatMessage>) =>
  Effect.gen(function*() {
    if (messages.length === 0) return yield* invalid("messages", messages, "at least one message is needed")
    for (const [i, message] of messages.entries()) {
      if (message.role !== "assistant" && (message.reasoning !== undefined || message.toolCalls !== undefined)) {
        return yield* invalid(`messages[${i}]`, message.role, "only assistant messages carry reasoning or tool calls")
      }
      if (message.role !== "tool" && message.toolCallId !== undefined) {
        return yield* invalid(`messages[${i}].toolCallId`, message.toolCallId, "only tool messages answer a tool call")
      }
    }
  })

/** Tools: at most MAX_TOOLS, MAX_TOOLS_BYTES of JSON in all, names valid and unique, object schemas. */
export const validateTools = (tools: ReadonlyArray<ToolDefinition>) =>
  Effect.gen(function*() {
    if (tools.length > MAX_TOOLS) return yield* invalid("tools", tools.length, `at most ${MAX_TOOLS} tools`)
    const json = yield* Effect.try({
      try: () => JSON.stringify(tools),
      catch: () => invalid("tools", tools.length, "tool definitions must be JSON values")
    })
    const bytes = Buffer.byteLength(json)
    if (bytes > MAX_TOOLS_BYTES) return yield* invalid("tools", bytes, `at most ${MAX_TOOLS_BYTES} bytes of tool definitions (JSON)`)
    const names = new Set<string>()
    for (const [i, tool] of tools.entries()) {
      if (!TOOL_NAME.test(tool.name)) {
        return yield* invalid(`tools[${i}].name`, tool.name, "must be 1 to 64 letters, digits, '_', '.' or '-'")
      }
      if (names.has(tool.name)) return yield* invalid(`tools[${i}].name`, tool.name, "tool names must be unique")
      names.add(tool.name)
      if (tool.parameters["type"] !== "object") {
        return yield* invalid(`tools[${i}].parameters`, tool.parameters, "must be a JSON schema of type \"object\"")
      }
    }
  })

export const validateGenerate = (request: GenerateRequest) =>
  Effect.gen(function*() {
    yield* validateMessages(request.messages)
    if (!Number.isSafeInteger(request.maxTokens) || request.maxTokens <= 0) {
      return yield* invalid("maxTokens", request.maxTokens, "must be a positive integer")
    }
    if (request.tools !== undefined) yield* validateTools(request.tools)
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
