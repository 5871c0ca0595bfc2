/**
 * An @effect/ai `Prompt` as nativegen chat messages, which the model's own chat template renders:
 * system and user text, the assistant's text, and tool results as tool messages. Parts of a
 * message's text are joined as they are (no separator is added). nativegen's models read text
 * only: a file part is refused as `MalformedInput`, naming its media type.
 */
import * as AiError from "@effect/ai/AiError"
import type * as Prompt from "@effect/ai/Prompt"
import * as Effect from "effect/Effect"
import type { ChatMessage } from "../domain/Inference.js"

/** Which @effect/ai call is mapping the prompt (named in a refusal). */
export interface Caller {
  readonly module: string
  readonly method: string
}

const malformed = (caller: Caller, description: string) => new AiError.MalformedInput({ ...caller, description })

/** A tool result as the tool message's text: strings as they are, anything else as JSON. */
const resultText = (result: unknown): string => typeof result === "string" ? result : JSON.stringify(result)

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
          const results: Array<ChatMessage> = []
          for (const part of message.content) {
            switch (part.type) {
              case "text":
                content += part.text
                break
              case "reasoning":
                // The template sees the answer; what the model thought stays in a continued conversation's cache.
                break
              case "file":
                return Effect.fail(malformed(caller, `an assistant message has a file part (${part.mediaType}); nativegen models read text only`))
              case "tool-call":
                return Effect.fail(malformed(caller, `an assistant message has a call of tool ${part.name}; this build has no tool calls`))
              case "tool-result":
                results.push({ role: "tool", content: resultText(part.result) })
                break
            }
          }
          messages.push({ role: "assistant", content }, ...results)
          break
        }
        case "tool":
          for (const part of message.content) messages.push({ role: "tool", content: resultText(part.result) })
          break
      }
    }
    return Effect.succeed(messages)
  })
