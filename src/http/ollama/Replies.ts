/**
 * The Provider's chunks as Ollama's replies: for chat, `message` with `content`, `thinking` (the
 * thought channel) and `tool_calls`; for generate, `response` and `thinking`; for both, when
 * asked, `logprobs` (each token's natural log probability, and its `top_logprobs`). Streamed, each chunk
 * is one line with `done: false`; the Done chunk is the last line, with `done_reason` and the
 * statistics in nanoseconds. Whole, the parts are joined into one reply with the statistics.
 *
 * Statistics, from the Done chunk (timings are measured from submission): `prompt_eval_count` is
 * the whole prompt (reused tokens included, as Ollama counts `cache_n + prompt_n`), `eval_count`
 * the generated tokens; `load_duration` the wait until the engine ran the request's first step,
 * `prompt_eval_duration` from then to the first token, `eval_duration` from the first token to the
 * end, so that the three add up to `total_duration`. Beside them, `nativegen` says how much of
 * the prompt came from cache (Ollama's clients ignore fields they do not know).
 */
import type { GenerateChunk } from "../../domain/Inference.js"

type Done = Extract<GenerateChunk, { _tag: "Done" }>
type Text = Extract<GenerateChunk, { _tag: "Text" }>
type ToolCallChunk = Extract<GenerateChunk, { _tag: "ToolCall" }>

/** Ollama's per-token log probability (with `logprobs`), and the most probable tokens (with `top_logprobs`). */
export interface Logprob {
  readonly token: string
  readonly logprob: number
  readonly top_logprobs?: ReadonlyArray<{ readonly token: string; readonly logprob: number }>
}

/** Ollama's tool call, as its responses give it. */
export interface ToolCall {
  readonly id: string
  readonly function: { readonly index: number; readonly name: string; readonly arguments: { readonly [key: string]: unknown } }
}

const nanoseconds = (millis: number) => Math.max(0, Math.round(millis * 1_000_000))

/** `done_reason`: `length` when the token limit ended it, else `stop` (Ollama's reason for tool calls too). */
export const doneReason = (done: Done) => (done.stopReason === "maxTokens" ? "length" : "stop")

/** The final line's fields after `done: true`. */
export const statistics = (done: Done) => {
  const { timings, usage } = done
  const firstToken = Math.max(timings.queueMillis, Math.min(timings.firstTokenMillis, timings.totalMillis))
  return {
    done_reason: doneReason(done),
    total_duration: nanoseconds(timings.totalMillis),
    load_duration: nanoseconds(timings.queueMillis),
    prompt_eval_count: usage.promptTokens,
    prompt_eval_duration: nanoseconds(firstToken - timings.queueMillis),
    eval_count: usage.generatedTokens,
    eval_duration: nanoseconds(timings.totalMillis - firstToken),
    nativegen: { reused_tokens: usage.reusedTokens, reuse: usage.reuse }
  }
}

const toolCallOf = (chunk: ToolCallChunk, index: number): ToolCall => ({
  id: chunk.id,
  function: { index, name: chunk.name, arguments: chunk.arguments }
})

/** The parts of a chunk that are not Done, in Ollama's terms (a malformed tool call's text is content). */
interface Part {
  readonly content: string
  readonly thinking: string
  readonly toolCall: ToolCall | undefined
  readonly logprobs: ReadonlyArray<Logprob>
}

/** A Text chunk's token probabilities as Ollama's `logprobs` (none unless the request asked). */
const logprobsOf = (chunk: Text): ReadonlyArray<Logprob> => {
  const { candidates, probabilities, tokenTexts } = chunk
  if (probabilities === undefined) return []
  return probabilities.map((probability, i) => ({
    token: tokenTexts?.[i] ?? "",
    logprob: Math.log(probability),
    ...(candidates === undefined
      ? {}
      : { top_logprobs: (candidates[i] ?? []).map((c) => ({ token: c.text, logprob: Math.log(c.probability) })) })
  }))
}

const noLogprobs: ReadonlyArray<Logprob> = []

/** Per generation: numbers its tool calls as Ollama's `function.index`. */
const partsOf = () => {
  let calls = 0
  return (chunk: Exclude<GenerateChunk, Done>): Part => {
    switch (chunk._tag) {
      case "Text":
        return chunk.channel === "thought"
          ? { content: "", thinking: chunk.text, toolCall: undefined, logprobs: logprobsOf(chunk) }
          : { content: chunk.text, thinking: "", toolCall: undefined, logprobs: logprobsOf(chunk) }
      case "ToolCall":
        return { content: "", thinking: "", toolCall: toolCallOf(chunk, calls++), logprobs: noLogprobs }
      case "MalformedToolCall":
        return { content: chunk.text, thinking: "", toolCall: undefined, logprobs: noLogprobs }
    }
  }
}

/** A whole generation's parts, joined. */
interface Joined {
  readonly content: string
  readonly thinking: string
  readonly toolCalls: ReadonlyArray<ToolCall>
  readonly logprobs: ReadonlyArray<Logprob>
}

const withLogprobs = (logprobs: ReadonlyArray<Logprob>) => (logprobs.length === 0 ? {} : { logprobs })

/** What each kind of reply does with the parts. */
export interface Shape {
  readonly part: (model: string, createdAt: string, part: Part) => object
  readonly done: (model: string, createdAt: string, done: Done) => object
  readonly whole: (model: string, createdAt: string, joined: Joined, done: Done) => object
}

const assistant = (content: string, thinking: string, toolCalls: ReadonlyArray<ToolCall>) => ({
  role: "assistant" as const,
  content,
  ...(thinking === "" ? {} : { thinking }),
  ...(toolCalls.length === 0 ? {} : { tool_calls: toolCalls })
})

export const chat: Shape = {
  part: (model, createdAt, part) => ({
    model,
    created_at: createdAt,
    message: assistant(part.content, part.thinking, part.toolCall === undefined ? [] : [part.toolCall]),
    ...withLogprobs(part.logprobs),
    done: false
  }),
  done: (model, createdAt, done) => ({
    model,
    created_at: createdAt,
    message: { role: "assistant", content: "" },
    done: true,
    ...statistics(done)
  }),
  whole: (model, createdAt, joined, done) => ({
    model,
    created_at: createdAt,
    message: assistant(joined.content, joined.thinking, joined.toolCalls),
    ...withLogprobs(joined.logprobs),
    done: true,
    ...statistics(done)
  })
}

export const generate: Shape = {
  part: (model, createdAt, part) => ({
    model,
    created_at: createdAt,
    response: part.content,
    ...(part.thinking === "" ? {} : { thinking: part.thinking }),
    ...(part.toolCall === undefined ? {} : { tool_calls: [part.toolCall] }),
    ...withLogprobs(part.logprobs),
    done: false
  }),
  done: (model, createdAt, done) => ({ model, created_at: createdAt, response: "", done: true, ...statistics(done) }),
  whole: (model, createdAt, joined, done) => ({
    model,
    created_at: createdAt,
    response: joined.content,
    ...(joined.thinking === "" ? {} : { thinking: joined.thinking }),
    ...(joined.toolCalls.length === 0 ? {} : { tool_calls: joined.toolCalls }),
    ...withLogprobs(joined.logprobs),
    done: true,
    ...statistics(done)
  })
}

/** Per streamed generation: each chunk as its line. */
export const streamLines = (shape: Shape, model: string) => {
  const toPart = partsOf()
  return (chunk: GenerateChunk, createdAt: string): object =>
    chunk._tag === "Done" ? shape.done(model, createdAt, chunk) : shape.part(model, createdAt, toPart(chunk))
}

/** A whole generation's chunks as one reply (undefined without its Done chunk). */
export const wholeReply = (shape: Shape, model: string, chunks: Iterable<GenerateChunk>, createdAt: string): object | undefined => {
  const toPart = partsOf()
  let content = ""
  let thinking = ""
  const toolCalls: Array<ToolCall> = []
  const logprobs: Array<Logprob> = []
  for (const chunk of chunks) {
    if (chunk._tag === "Done") return shape.whole(model, createdAt, { content, thinking, toolCalls, logprobs }, chunk)
    const part = toPart(chunk)
    content += part.content
    thinking += part.thinking
    if (part.toolCall !== undefined) toolCalls.push(part.toolCall)
    logprobs.push(...part.logprobs)
  }
  return undefined
}
