/**
 * A nativegen generation as @effect/ai response parts. Streaming: the thought channel is a
 * `reasoning-start`/`-delta`/`-end` block, the answer a `text-*` block (a new block each time the
 * channel changes), each tool call a `tool-call` part (its arguments as the params, for
 * @effect/ai's toolkit to decode and run), and the `Done` chunk a `finish` part with the true
 * reason (`length` when maxTokens ran out, `tool-calls` after a turn of tool calls, `stop` at the
 * end of the turn or a stop string), the usage (cached input tokens are the reused ones,
 * reasoning tokens the thought channel's) and nativegen's own facts under `metadata.nativegen`
 * (stop reason, reuse kind, timings, checkpoint, the channel a limit cut). A tool call that is
 * not a call (`MalformedToolCall`) is a `MalformedOutput` failure naming its text, as @effect/ai
 * fails on parameters its toolkit cannot decode. Whole parts (for `generateText`) are the same
 * blocks joined.
 */
import * as AiError from "@effect/ai/AiError"
import type * as Response from "@effect/ai/Response"
import * as Either from "effect/Either"
import type { ChatMessage, ChatToolCall, Checkpoint, GenerateChunk, ReuseKind, StopReason, Timings } from "../domain/Inference.js"
import { assistantMessage, type Caller } from "./Messages.js"

/** What nativegen reports about a generation, on its finish part as `metadata.nativegen`. */
export type NativegenMetadata = {
  readonly stopReason: StopReason
  /** How the prompt's cached part was reused (`continuation` for a continued conversation). */
  readonly reuse: ReuseKind
  readonly timings: Timings
  /** Hand it back (with the conversation) to continue the conversation from its cache. */
  readonly checkpoint?: Checkpoint | undefined
  /** With stop reason `maxTokens`: the channel the limit cut while it was open. */
  readonly truncatedChannel?: "thought" | "tool" | undefined
}

declare module "@effect/ai/Response" {
  export interface FinishPartMetadata extends ProviderMetadata {
    readonly nativegen?: NativegenMetadata | undefined
  }
}

export const finishReason = (reason: StopReason): Response.FinishReason => {
  switch (reason) {
    case "maxTokens":
      return "length"
    case "toolCalls":
      return "tool-calls"
    case "endOfGeneration":
    case "stopString":
      return "stop"
  }
}

type Done = Extract<GenerateChunk, { readonly _tag: "Done" }>

/**
 * Per-generation state turning chunks into stream parts, in order. `turn` is the assistant message
 * of the output so far, as the prompt of a later turn maps it (a continued conversation records it).
 */
export const streamState = (caller: Caller) => {
  let open: { readonly kind: "text" | "reasoning"; readonly id: string } | undefined
  let blocks = 0
  let reasoningTokens = 0
  let answer = ""
  let reasoning = ""
  const toolCalls: Array<ChatToolCall> = []

  const close = (): Array<Response.StreamPartEncoded> => {
    if (open === undefined) return []
    const { id, kind } = open
    open = undefined
    return [kind === "text" ? { type: "text-end", id } : { type: "reasoning-end", id }]
  }

  const delta = (kind: "text" | "reasoning", text: string): Array<Response.StreamPartEncoded> => {
    const parts = open?.kind === kind ? [] : close()
    if (open === undefined) {
      const id = `${kind}-${blocks++}`
      open = { kind, id }
      parts.push(kind === "text" ? { type: "text-start", id } : { type: "reasoning-start", id })
    }
    const id = open.id
    parts.push(kind === "text" ? { type: "text-delta", id, delta: text } : { type: "reasoning-delta", id, delta: text })
    return parts
  }

  const finish = (done: Done): Response.FinishPartEncoded => ({
    type: "finish",
    reason: finishReason(done.stopReason),
    usage: {
      inputTokens: done.usage.promptTokens,
      outputTokens: done.usage.generatedTokens,
      totalTokens: done.usage.promptTokens + done.usage.generatedTokens,
      reasoningTokens,
      cachedInputTokens: done.usage.reusedTokens
    },
    metadata: {
      nativegen: {
        stopReason: done.stopReason,
        reuse: done.usage.reuse,
        timings: done.timings,
        ...(done.checkpoint === undefined ? {} : { checkpoint: done.checkpoint }),
        ...(done.truncatedChannel === undefined ? {} : { truncatedChannel: done.truncatedChannel })
      }
    }
  })

  return {
    get turn(): ChatMessage {
      return assistantMessage(answer, reasoning, toolCalls)
    },
    /** The parts of one chunk, or why the output cannot be given as parts. */
    parts: (chunk: GenerateChunk): Either.Either<Array<Response.StreamPartEncoded>, AiError.MalformedOutput> => {
      switch (chunk._tag) {
        case "Done":
          return Either.right([...close(), finish(chunk)])
        case "ToolCall":
          toolCalls.push({ id: chunk.id, name: chunk.name, arguments: chunk.arguments })
          return Either.right([...close(), { type: "tool-call", id: chunk.id, name: chunk.name, params: chunk.arguments, providerExecuted: false }])
        case "MalformedToolCall":
          return Either.left(
            new AiError.MalformedOutput({ ...caller, description: `the model's tool call is not a call (${chunk.reason}): ${chunk.text}` })
          )
        case "Text":
          switch (chunk.channel) {
            case "thought":
              reasoningTokens += chunk.tokens.length
              reasoning += chunk.text
              return Either.right(delta("reasoning", chunk.text))
            case "answer":
              answer += chunk.text
              return Either.right(delta("text", chunk.text))
            case "tool":
              // A call's text: the call itself arrives as a ToolCall (or MalformedToolCall) chunk.
              return Either.right([])
          }
      }
    }
  }
}

/** Stream parts as whole parts: each reasoning and text block joined into one part. */
export const wholeParts = (streamed: ReadonlyArray<Response.StreamPartEncoded>): Array<Response.PartEncoded> => {
  const parts: Array<Response.PartEncoded> = []
  let text: { kind: "text" | "reasoning"; value: string } | undefined
  for (const part of streamed) {
    switch (part.type) {
      case "text-start":
      case "reasoning-start":
        text = { kind: part.type === "text-start" ? "text" : "reasoning", value: "" }
        break
      case "text-delta":
      case "reasoning-delta":
        if (text !== undefined) text.value += part.delta
        break
      case "text-end":
      case "reasoning-end":
        if (text !== undefined) parts.push(text.kind === "text" ? { type: "text", text: text.value } : { type: "reasoning", text: text.value })
        text = undefined
        break
      case "finish":
      case "tool-call":
        parts.push(part)
        break
    }
  }
  return parts
}
