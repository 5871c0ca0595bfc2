/**
 * A generation's chunks as OpenAI's chat completion: whole (`chat.completion`) or as stream chunks
 * (`chat.completion.chunk`). The thought channel is `reasoning_content`, answers are `content`,
 * tool calls `tool_calls` (arguments as a JSON string; in streams with their `index`). A
 * malformed tool call's text is content: the client sees what the model wrote. A forced tool call
 * (a tool choice that requires one) is generated as JSON under a grammar and returned as a call;
 * cut short by max tokens, its text is content and the finish reason `length`.
 */
import * as Crypto from "node:crypto"
import type { GenerateChunk } from "../../domain/Inference.js"
import { type ChatEntry, chatEntries } from "./Logprobs.js"
import { type Done, finishReasonOf, nativegenOf, timingsOf, usageOf } from "./Usage.js"

export interface ChatMeta {
  readonly id: string
  /** Unix seconds. */
  readonly created: number
  readonly model: string
  readonly forcedToolCall: boolean
  readonly logprobs: boolean
}

export interface ToolCallOut {
  readonly id: string
  readonly type: "function"
  readonly function: { readonly name: string; readonly arguments: string }
}

const toolCallOut = (id: string, name: string, args: unknown): ToolCallOut => ({
  id,
  type: "function",
  function: { name, arguments: JSON.stringify(args) }
})

/** A forced call's JSON text as a tool call, or undefined when it is not one (cut short). */
const forcedCallOf = (text: string): ToolCallOut | undefined => {
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch {
    return undefined
  }
  if (typeof parsed !== "object" || parsed === null || !("name" in parsed) || typeof parsed.name !== "string") return undefined
  return toolCallOut(`call_${Crypto.randomUUID().replace(/-/g, "").slice(0, 24)}`, parsed.name, "arguments" in parsed ? parsed.arguments : {})
}

/** Tokens of the thought channel: `completion_tokens_details.reasoning_tokens`. */
const thoughtTokens = (chunk: GenerateChunk) => (chunk._tag === "Text" && chunk.channel === "thought" ? chunk.tokens.length : 0)

/** The whole `chat.completion` for a generation's chunks (the last is Done). */
export const chatCompletion = (meta: ChatMeta, chunks: ReadonlyArray<GenerateChunk>, done: Done) => {
  let content = ""
  let reasoning = ""
  let reasoningTokens = 0
  const toolCalls: Array<ToolCallOut> = []
  const entries: Array<ChatEntry> = []
  const malformed: Array<{ readonly reason: string }> = []
  for (const chunk of chunks) {
    reasoningTokens += thoughtTokens(chunk)
    switch (chunk._tag) {
      case "Text":
        if (chunk.channel === "thought") reasoning += chunk.text
        else if (chunk.channel === "answer") {
          content += chunk.text
          if (meta.logprobs) entries.push(...chatEntries(chunk))
        }
        break
      case "ToolCall":
        toolCalls.push(toolCallOut(chunk.id, chunk.name, chunk.arguments))
        break
      case "MalformedToolCall":
        content += chunk.text
        malformed.push({ reason: chunk.reason })
        break
    }
  }
  if (meta.forcedToolCall) {
    const call = forcedCallOf(content)
    if (call !== undefined) {
      toolCalls.push(call)
      content = ""
    }
  }
  return {
    id: meta.id,
    object: "chat.completion",
    created: meta.created,
    model: meta.model,
    choices: [{
      index: 0,
      message: {
        role: "assistant",
        content: content === "" && toolCalls.length > 0 ? null : content,
        ...(reasoning === "" ? {} : { reasoning_content: reasoning }),
        ...(toolCalls.length === 0 ? {} : { tool_calls: toolCalls }),
        refusal: null
      },
      logprobs: meta.logprobs ? { content: entries, refusal: null } : null,
      finish_reason: finishReasonOf(done, toolCalls.length > 0)
    }],
    usage: usageOf(done, reasoningTokens),
    timings: timingsOf(done),
    nativegen: { ...nativegenOf(done), ...(malformed.length === 0 ? {} : { malformed_tool_calls: malformed }) }
  }
}

/**
 * The stream chunks of a chat completion, made chunk by chunk: `start` first (the assistant
 * role), then `next` for each generation chunk; Done gives the chunk with the finish reason (and
 * the timings), then, when `includeUsage`, one with `choices: []` and the usage.
 */
export const chatStream = (meta: ChatMeta, includeUsage: boolean) => {
  let reasoningTokens = 0
  let toolCalls = 0
  /** A forced call's JSON, held back until it is complete. */
  let forced = ""
  const chunkOf = (delta: object, logprobs: ReadonlyArray<ChatEntry> | null = null, finishReason: string | null = null) => ({
    id: meta.id,
    object: "chat.completion.chunk",
    created: meta.created,
    model: meta.model,
    choices: [{
      index: 0,
      delta,
      logprobs: logprobs === null ? null : { content: logprobs, refusal: null },
      finish_reason: finishReason
    }]
  })
  const start = chunkOf({ role: "assistant", content: "" })
  const next = (chunk: GenerateChunk): ReadonlyArray<object> => {
    reasoningTokens += thoughtTokens(chunk)
    switch (chunk._tag) {
      case "Text":
        if (chunk.channel === "thought") return [chunkOf({ reasoning_content: chunk.text })]
        if (chunk.channel === "tool") return []
        if (meta.forcedToolCall) {
          forced += chunk.text
          return []
        }
        return [chunkOf({ content: chunk.text }, meta.logprobs ? chatEntries(chunk) : null)]
      case "ToolCall":
        return [chunkOf({ tool_calls: [{ index: toolCalls++, ...toolCallOut(chunk.id, chunk.name, chunk.arguments) }] })]
      case "MalformedToolCall":
        return [chunkOf({ content: chunk.text })]
      case "Done": {
        const call = meta.forcedToolCall ? forcedCallOf(forced) : undefined
        const held = meta.forcedToolCall && call === undefined && forced !== "" ? [chunkOf({ content: forced })] : []
        const calls = call === undefined ? [] : [chunkOf({ tool_calls: [{ index: toolCalls++, ...call }] })]
        const finish = {
          ...chunkOf({}, null, finishReasonOf(chunk, toolCalls > 0)),
          timings: timingsOf(chunk),
          nativegen: nativegenOf(chunk)
        }
        const usage = includeUsage
          ? [{ id: meta.id, object: "chat.completion.chunk", created: meta.created, model: meta.model, choices: [], usage: usageOf(chunk, reasoningTokens) }]
          : []
        return [...held, ...calls, finish, ...usage]
      }
    }
  }
  return { start, next }
}
