/**
 * A plain-prompt generation's chunks as OpenAI's legacy `text_completion`, whole or streamed. The
 * text is everything generated, in order: every channel's text (a raw prompt has no template to
 * keep thoughts apart for), a tool call as its JSON, a malformed one as written.
 */
import type { GenerateChunk } from "../../domain/Inference.js"
import { addCompletionEntries, type CompletionLogprobs, emptyCompletionLogprobs } from "./Logprobs.js"
import { type Done, finishReasonOf, nativegenOf, timingsOf, usageOf } from "./Usage.js"

export interface CompletionMeta {
  readonly id: string
  /** Unix seconds. */
  readonly created: number
  readonly model: string
  readonly logprobs: boolean
}

const textOf = (chunk: GenerateChunk) => {
  switch (chunk._tag) {
    case "Text":
    case "MalformedToolCall":
      return chunk.text
    case "ToolCall":
      return JSON.stringify({ name: chunk.name, arguments: chunk.arguments })
    case "Done":
      return ""
  }
}

/** The whole `text_completion` for a generation's chunks. */
export const completion = (meta: CompletionMeta, chunks: ReadonlyArray<GenerateChunk>, done: Done) => {
  let text = ""
  const logprobs = emptyCompletionLogprobs()
  for (const chunk of chunks) {
    if (meta.logprobs && chunk._tag === "Text") addCompletionEntries(logprobs, chunk, text.length)
    text += textOf(chunk)
  }
  return {
    id: meta.id,
    object: "text_completion",
    created: meta.created,
    model: meta.model,
    choices: [{ text, index: 0, logprobs: meta.logprobs ? logprobs : null, finish_reason: finishReasonOf(done, false) }],
    usage: usageOf(done, 0),
    timings: timingsOf(done),
    nativegen: nativegenOf(done)
  }
}

/** The stream chunks of a text completion, chunk by chunk; Done gives the finish and, when asked, the usage. */
export const completionStream = (meta: CompletionMeta, includeUsage: boolean) => {
  let offset = 0
  const chunkOf = (text: string, logprobs: CompletionLogprobs | null, finishReason: string | null) => ({
    id: meta.id,
    object: "text_completion",
    created: meta.created,
    model: meta.model,
    choices: [{ text, index: 0, logprobs, finish_reason: finishReason }]
  })
  return (chunk: GenerateChunk): ReadonlyArray<object> => {
    if (chunk._tag !== "Done") {
      const text = textOf(chunk)
      let logprobs: CompletionLogprobs | null = null
      if (meta.logprobs && chunk._tag === "Text") {
        logprobs = emptyCompletionLogprobs()
        addCompletionEntries(logprobs, chunk, offset)
      }
      offset += text.length
      return [chunkOf(text, logprobs, null)]
    }
    const finish = { ...chunkOf("", null, finishReasonOf(chunk, false)), timings: timingsOf(chunk), nativegen: nativegenOf(chunk) }
    const usage = includeUsage
      ? [{ id: meta.id, object: "text_completion", created: meta.created, model: meta.model, choices: [], usage: usageOf(chunk, 0) }]
      : []
    return [finish, ...usage]
  }
}
