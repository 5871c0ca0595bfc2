/**
 * HTTP clients for the benchmark, through Node's fetch (which keeps the connection between
 * requests): a streaming OpenAI chat client, the same for llama-server and nativegen's HTTP API,
 * timing the server-sent events as they arrive; a one-shot chat request; and llama-server's own
 * `/apply-template` and streaming `/completion`, which send one event per token (its chat stream
 * holds back text its reasoning parser has not placed yet, such as the bench model's newlines).
 */
import type { Message } from "./Prompts.js"

/** What one streamed request showed. */
export interface Streamed {
  /** Milliseconds from sending to each event that carried generated text (or, for 1-token requests, the first event with a choice). */
  readonly arrivals: ReadonlyArray<number>
  /** From sending to the end of the stream. */
  readonly totalMillis: number
  /** The generated text (content and reasoning). */
  readonly text: string
  readonly promptTokens: number | undefined
  readonly completionTokens: number | undefined
  /** llama-server's own figures (`timings`), where the server sent them. */
  readonly timings: {
    readonly cacheN?: number
    readonly promptN?: number
    readonly promptPerSecond?: number
    readonly predictedN?: number
    readonly predictedPerSecond?: number
  } | undefined
}

export interface ChatRequest {
  /** The model name the server knows (llama-server ignores it). */
  readonly model: string
  readonly messages: ReadonlyArray<Message>
  readonly maxTokens: number
  /** Extra body fields (e.g. `cache_prompt`, `logit_bias`). */
  readonly extra?: Record<string, unknown>
}

interface Event {
  readonly choices?: ReadonlyArray<{ readonly delta?: { readonly content?: string | null; readonly reasoning_content?: string | null } }>
  readonly usage?: { readonly prompt_tokens?: number; readonly completion_tokens?: number }
  readonly timings?: {
    readonly cache_n?: number
    readonly prompt_n?: number
    readonly prompt_per_second?: number
    readonly predicted_n?: number
    readonly predicted_per_second?: number
  }
}

/** The request body: greedy, streamed, with usage in the last event. */
export const chatBody = (request: ChatRequest): Record<string, unknown> => ({
  model: request.model,
  messages: request.messages,
  max_tokens: request.maxTokens,
  temperature: 0,
  stream: true,
  stream_options: { include_usage: true },
  ...request.extra
})

/** Whether an event carries generated text (content or reasoning). */
export const carriesText = (event: Event): boolean =>
  event.choices?.some((c) => (c.delta?.content ?? "") !== "" || (c.delta?.reasoning_content ?? "") !== "") ?? false

/** Splits server-sent-event text into complete `data:` payloads, returning the unfinished rest. */
export const splitEvents = (buffer: string): { readonly payloads: ReadonlyArray<string>; readonly rest: string } => {
  const blocks = buffer.split(/\r?\n\r?\n/)
  const rest = blocks.pop()!
  const payloads: Array<string> = []
  for (const block of blocks) {
    const data = block.split(/\r?\n/).filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n")
    if (data !== "") payloads.push(data)
  }
  return { payloads, rest }
}

/** llama-server's own timings, in this module's names. */
const timingsOf = (t: NonNullable<Event["timings"]>): NonNullable<Streamed["timings"]> => ({
  ...(t.cache_n === undefined ? {} : { cacheN: t.cache_n }),
  ...(t.prompt_n === undefined ? {} : { promptN: t.prompt_n }),
  ...(t.prompt_per_second === undefined ? {} : { promptPerSecond: t.prompt_per_second }),
  ...(t.predicted_n === undefined ? {} : { predictedN: t.predicted_n }),
  ...(t.predicted_per_second === undefined ? {} : { predictedPerSecond: t.predicted_per_second })
})

/** The server-sent-event payloads of a response body, each with when its bytes arrived (ms after `start`). */
async function* eventsOf(body: AsyncIterable<Uint8Array>, start: number): AsyncGenerator<{ readonly now: number; readonly payload: string }> {
  let buffer = ""
  const decoder = new TextDecoder()
  for await (const bytes of body) {
    const now = performance.now() - start
    buffer += decoder.decode(bytes, { stream: true })
    const { payloads, rest } = splitEvents(buffer)
    buffer = rest
    for (const payload of payloads) yield { now, payload }
  }
}

export const streamChat = async (baseUrl: string, request: ChatRequest, headers: Record<string, string> = {}): Promise<Streamed> => {
  const start = performance.now()
  const response = await fetch(`${baseUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(chatBody(request))
  })
  if (!response.ok || response.body === null) {
    throw new Error(`${baseUrl}/v1/chat/completions answered ${response.status}: ${await response.text()}`)
  }
  const arrivals: Array<number> = []
  let promptTokens: number | undefined
  let completionTokens: number | undefined
  let timings: Streamed["timings"]
  let firstChoice: number | undefined
  let text = ""
  for await (const { now, payload } of eventsOf(response.body, start)) {
    if (payload === "[DONE]") continue
    const event = JSON.parse(payload) as Event & { error?: unknown }
    if (event.error !== undefined) throw new Error(`${baseUrl}: stream error ${JSON.stringify(event.error)}`)
    if ((event.choices?.length ?? 0) > 0) firstChoice ??= now
    if (carriesText(event)) {
      arrivals.push(now)
      for (const c of event.choices ?? []) text += (c.delta?.reasoning_content ?? "") + (c.delta?.content ?? "")
    }
    if (event.usage !== undefined) {
      promptTokens = event.usage.prompt_tokens
      completionTokens = event.usage.completion_tokens
    }
    if (event.timings !== undefined) timings = timingsOf(event.timings)
  }
  return {
    arrivals: arrivals.length === 0 && firstChoice !== undefined ? [firstChoice] : arrivals,
    totalMillis: performance.now() - start,
    text,
    promptTokens,
    completionTokens,
    timings
  }
}

/** A non-streamed chat request; resolves when the whole answer has arrived. */
export const chatOnce = async (baseUrl: string, request: ChatRequest): Promise<void> => {
  const response = await fetch(`${baseUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: request.model, messages: request.messages, max_tokens: request.maxTokens, temperature: 0, ...request.extra })
  })
  const text = await response.text()
  if (!response.ok) throw new Error(`${baseUrl}/v1/chat/completions answered ${response.status}: ${text}`)
}

/** llama-server's rendering of `messages` with the model's template and the generation prompt. */
export const applyTemplate = async (baseUrl: string, messages: ReadonlyArray<Message>): Promise<string> => {
  const response = await fetch(`${baseUrl}/apply-template`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ messages })
  })
  const body = (await response.json()) as { prompt?: unknown }
  if (!response.ok || typeof body.prompt !== "string") throw new Error(`${baseUrl}/apply-template answered ${response.status}: ${JSON.stringify(body)}`)
  return body.prompt
}

interface CompletionEvent {
  readonly content?: string
  readonly stop?: boolean
  readonly tokens_evaluated?: number
  readonly tokens_predicted?: number
  readonly timings?: Event["timings"]
}

/**
 * llama-server's `/completion`, streamed, greedy, with its prompt cache (`cache_prompt`): one
 * event per generated token.
 */
export const streamCompletion = async (
  baseUrl: string,
  request: { readonly prompt: string; readonly maxTokens: number; readonly extra?: Record<string, unknown> }
): Promise<Streamed> => {
  const start = performance.now()
  const response = await fetch(`${baseUrl}/completion`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      prompt: request.prompt,
      n_predict: request.maxTokens,
      temperature: 0,
      stream: true,
      cache_prompt: true,
      ...request.extra
    })
  })
  if (!response.ok || response.body === null) throw new Error(`${baseUrl}/completion answered ${response.status}: ${await response.text()}`)
  const arrivals: Array<number> = []
  let last: CompletionEvent | undefined
  let text = ""
  for await (const { now, payload } of eventsOf(response.body, start)) {
    const event = JSON.parse(payload) as CompletionEvent
    if (event.stop === true) last = event
    else {
      arrivals.push(now)
      text += event.content ?? ""
    }
  }
  const t = last?.timings
  return {
    arrivals,
    totalMillis: performance.now() - start,
    text,
    promptTokens: last?.tokens_evaluated,
    completionTokens: last?.tokens_predicted,
    timings: t === undefined ? undefined : timingsOf(t)
  }
}
