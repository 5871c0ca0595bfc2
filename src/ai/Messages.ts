/**
 * An @effect/ai `Prompt` as nativegen chat messages, which the model's own chat template renders:
 * system and user text; the assistant's text, reasoning and tool calls (the template's `content`,
 * `reasoning_content` and `tool_calls`); tool results as tool messages naming the call they
 * answer. Parts of one message's text are joined as they are (no separator is added). nativegen's
 * models read text only: a file part is refused as `MalformedInput`, naming its media type.
 */
import * as AiError from "@effect/ai/AiError"
import type * as Prompt from "@effect/ai/Prompt"
import * as Effect from "effect/Effect"
import * as Predicate from "effect/Predicate"
import type { ChatMessage, ChatToolCall, JsonObject } from "../domain/Inference.js"

/** Which @effect/ai call is mapping the prompt (named in a refusal). */
export interface Caller {
  readonly module: string
  readonly method: string
}

const malformed = (caller: Caller, description: string) => new AiError.MalformedInput({ ...caller, description })

/** A tool result as the tool message's text: strings as they are, anything else as JSON. */
const resultText = (result: unknown): string => typeof result === "string" ? result : JSON.stringify(result)

const isJsonObject = (value: unknown): value is JsonObject => Predicate.isRecord(value)

/** An assistant message with only the fields it has (so equal turns give equal messages). */
export const assistantMessage = (
  content: string,
  reasoning: string,
  toolCalls: ReadonlyArray<ChatToolCall>
): ChatMessage => ({
  role: "assistant",
  content,
  ...(reasoning === "" ? {} : { reasoning }),
  ...(toolCalls.length === 0 ? {} : { toolCalls })
})

/** The chat messages of `prompt`, in order. */
export const fromPrompt = (prompt: Prompt.Prompt, caller: Caller): Effect.Effect<Array<ChatMessage>, AiError.MalformedInput> =>
  Effect.suspend(() => {
    const messages: Array<ChatMessage> = []
    for (const message of prompt.content) {
      switch (message.role) {
        case "system":
          messages.push({ role: "system", content: message.content })
          break
        case "user": {
          let content = ""
          for (const part of message.content) {
            if (part.type === "file") return Effect.fail(malformed(caller, `a user message has a file part (${part.mediaType}); nativegen models read text only`))
            content += part.text
          }
          messages.push({ role: "user", content })
          break
        }
        case "assistant": {
          let content = ""
          let reasoning = ""
          const toolCalls: Array<ChatToolCall> = []
          const results: Array<ChatMessage> = []
          for (const part of message.content) {
            switch (part.type) {
              case "text":
                content += part.text
                break
              case "reasoning":
                reasoning += part.text
                break
              case "file":
                return Effect.fail(malformed(caller, `an assistant message has a file part (${part.mediaType}); nativegen models read text only`))
              case "tool-call":
                if (!isJsonObject(part.params)) {
                  return Effect.fail(malformed(caller, `the call ${part.id} of tool ${part.name} has parameters that are not a JSON object`))
                }
                toolCalls.push({ id: part.id, name: part.name, arguments: part.params })
                break
              case "tool-result":
                results.push({ role: "tool", content: resultText(part.result), toolCallId: part.id })
                break
            }
          }
          messages.push(assistantMessage(content, reasoning, toolCalls), ...results)
          break
        }
        case "tool":
          for (const part of message.content) messages.push({ role: "tool", content: resultText(part.result), toolCallId: part.id })
          break
      }
    }
    return Effect.succeed(messages)
  })
