/**
 * Tool calls in generated output: the text between `<tool_call>` and `</tool_call>` (the tool
 * channel) parsed as the call Qwen-style templates ask for, `{"name": <string>, "arguments":
 * <object>}`. Arguments given as a JSON string of an object (OpenAI's wire form) are accepted
 * too. Anything else is malformed, with the reason; the caller reports it and goes on.
 */
import * as Either from "effect/Either"
import type { JsonObject } from "../../domain/Inference.js"

export interface ParsedToolCall {
  readonly name: string
  readonly arguments: JsonObject
}

const isObject = (value: unknown): value is JsonObject =>
  typeof value === "object" && value !== null && !Array.isArray(value)

const parseJson = (text: string): Either.Either<unknown, string> => {
  try {
    return Either.right(JSON.parse(text) as unknown)
  } catch (cause) {
    return Either.left(`not JSON: ${cause instanceof Error ? cause.message : String(cause)}`)
  }
}

/** The call in a tool channel's text, or why it is not one. */
export const parseToolCall = (text: string): Either.Either<ParsedToolCall, string> =>
  Either.flatMap(parseJson(text.trim()), (call) => {
    if (!isObject(call)) return Either.left("not a JSON object")
    const name = call["name"]
    if (typeof name !== "string" || name.length === 0) return Either.left("no \"name\" string")
    const args = call["arguments"] ?? {}
    if (isObject(args)) return Either.right({ name, arguments: args })
    if (typeof args === "string") {
      const inner = parseJson(args)
      if (Either.isRight(inner) && isObject(inner.right)) return Either.right({ name, arguments: inner.right })
    }
    return Either.left("\"arguments\" is not a JSON object")
  })
