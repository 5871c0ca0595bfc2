/**
 * From Ollama's chat and generate requests to the Provider's GenerateRequest, deciding for each
 * field whether it maps truthfully: what does is translated (`logprobs` and `top_logprobs` to the
 * engine's token probabilities), what the runtime decides for itself (load-time options,
 * `keep_alive`) is accepted and ignored, and what would be silently wrong (images, a suffix, a
 * thinking level, a sampler nativegen lacks) is refused with a 400 naming the field. See docs/decisions.md, "Ollama's API".
 */
import * as Either from "effect/Either"
import type { ChatMessage, GenerateRequest, ResponseFormat, Sampling, ToolDefinition } from "../../domain/Inference.js"
import { MAX_TOP_PROBABILITIES } from "../../domain/RequestRules.js"
import { MAX_KEY_LENGTH } from "../KeyedConversations.js"
import { badRequest, type Refusal } from "../Refusals.js"
import type * as Wire from "./Wire.js"

/** Ollama's sampling defaults (its `api.DefaultOptions`), for what a request leaves out. */
export const defaultSampling = { temperature: 0.8, topK: 40, topP: 0.9 } as const

/** The header naming a conversation, for continuation reuse across requests that resend the history. */
export const conversationHeader = "x-nativegen-conversation"

/** Samplers nativegen does not have, with the value at which each does nothing (accepted). */
const neutralOptions = [
  ["min_p", 0],
  ["typical_p", 1],
  ["tfs_z", 1],
  ["repeat_penalty", 1],
  ["presence_penalty", 0],
  ["frequency_penalty", 0],
  ["mirostat", 0]
] as const

const refuse = (field: string, message: string): Either.Either<never, Refusal> => Either.left(badRequest(message, field))

const samplingOf = (options: Wire.Options): Either.Either<Sampling, Refusal> => {
  for (const [name, neutral] of neutralOptions) {
    const value = options[name]
    if (value !== undefined && value !== neutral) {
      return refuse(
        `options.${name}`,
        `options.${name} ${value} is not supported: nativegen samples with temperature, top_k, top_p and seed only (leave it out or set it to ${neutral})`
      )
    }
  }
  return Either.right({
    temperature: options.temperature ?? defaultSampling.temperature,
    topK: options.top_k ?? defaultSampling.topK,
    topP: options.top_p ?? defaultSampling.topP,
    // Ollama's seed -1 (its default) is a random seed: none.
    ...(options.seed === undefined || options.seed < 0 ? {} : { seed: options.seed })
  })
}

/**
 * `num_predict` as the request's budget: -1 (Ollama's default, until the model stops) and -2
 * (until the context is full) give none, the Provider's rest of the admitted context.
 */
const maxTokensOf = (options: Wire.Options) =>
  options.num_predict === undefined || options.num_predict === -1 || options.num_predict === -2 ? {} : { maxTokens: options.num_predict }

const formatOf = (format: Wire.Format | undefined): ResponseFormat | undefined =>
  format === undefined || format === "" ? undefined : format === "json" ? { type: "json" } : { type: "jsonSchema", schema: format }

const thinkingOf = (think: Wire.Think | undefined): Either.Either<boolean | undefined, Refusal> =>
  typeof think === "string"
    ? refuse("think", `think "${think}" is not supported: nativegen's chat templates take no thinking level (use true or false)`)
    : Either.right(think)

/** The duration `keep_alive` gives, in milliseconds (negative: forever), or why it is not one. */
export const keepAliveMillis = (keepAlive: Wire.KeepAlive): Either.Either<number, Refusal> => {
  if (typeof keepAlive === "number") return Either.right(keepAlive * 1000)
  const units: Record<string, number> = { ns: 1e-6, us: 1e-3, "µs": 1e-3, "μs": 1e-3, ms: 1, s: 1e3, m: 60e3, h: 3600e3 }
  const text = keepAlive.trim()
  const sign = text.startsWith("-") ? -1 : 1
  const body = text.replace(/^[-+]/, "")
  if (body === "0") return Either.right(0)
  const parts = [...body.matchAll(/(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)/g)]
  if (parts.length === 0 || parts.map((p) => p[0]).join("") !== body) {
    return refuse("keep_alive", `invalid keep_alive ${JSON.stringify(keepAlive)}: expected seconds or a duration such as "5m"`)
  }
  return Either.right(sign * parts.reduce((total, [, amount, unit]) => total + Number(amount) * units[unit!]!, 0))
}

/**
 * A load-only request (no prompt, no messages): Ollama loads the model and answers `done_reason:
 * "load"`; with `keep_alive` 0 it unloads it, which nativegen never does while it serves.
 */
export const checkLoadOnly = (keepAlive: Wire.KeepAlive | undefined): Either.Either<void, Refusal> =>
  keepAlive === undefined
    ? Either.void
    : Either.flatMap(keepAliveMillis(keepAlive), (millis) =>
      millis === 0
        ? refuse("keep_alive", "keep_alive 0 cannot unload the model: nativegen keeps its models loaded while it serves")
        : Either.void)

/** The options every generation shares: sampling, budget, stop strings, format, thinking. */
const commonOf = (body: Wire.ChatRequest | Wire.GenerateRequest) =>
  Either.gen(function*() {
    if (body.keep_alive !== undefined) yield* keepAliveMillis(body.keep_alive)
    const topLogprobs = body.top_logprobs ?? 0
    if (topLogprobs < 0 || topLogprobs > MAX_TOP_PROBABILITIES) {
      yield* refuse("top_logprobs", `top_logprobs must be between 0 and ${MAX_TOP_PROBABILITIES}`)
    }
    const options = body.options ?? {}
    const sampling = yield* samplingOf(options)
    const thinking = yield* thinkingOf(body.think)
    const responseFormat = formatOf(body.format)
    return {
      fields: {
        ...maxTokensOf(options),
        sampling,
        ...(options.stop === undefined || options.stop.length === 0 ? {} : { stop: options.stop }),
        ...(responseFormat === undefined ? {} : { responseFormat }),
        ...(thinking === undefined ? {} : { thinking }),
        // As Ollama: top_logprobs counts only with logprobs.
        ...(body.logprobs === true ? { probabilities: true, ...(topLogprobs > 0 ? { topProbabilities: topLogprobs } : {}) } : {})
      }
    }
  })

const messageOf = (message: Wire.Message, i: number): Either.Either<ChatMessage, Refusal> => {
  if (message.images !== undefined && message.images.length > 0) {
    return refuse(`messages[${i}].images`, "images are not supported: nativegen serves text models")
  }
  return Either.right({
    role: message.role,
    content: message.content ?? "",
    ...(message.thinking === undefined || message.thinking === "" ? {} : { reasoning: message.thinking }),
    ...(message.tool_calls === undefined || message.tool_calls.length === 0
      ? {}
      : {
        toolCalls: message.tool_calls.map((call) => ({
          ...(call.id === undefined ? {} : { id: call.id }),
          name: call.function.name,
          arguments: call.function.arguments ?? {}
        }))
      }),
    ...(message.tool_call_id === undefined ? {} : { toolCallId: message.tool_call_id })
  })
}

const toolOf = (tool: Wire.Tool): ToolDefinition => ({
  name: tool.function.name,
  ...(tool.function.description === undefined ? {} : { description: tool.function.description }),
  parameters: tool.function.parameters ?? { type: "object", properties: {} }
})

/** `/api/chat` with at least one message. */
export const chatRequest = (body: Wire.ChatRequest): Either.Either<GenerateRequest, Refusal> =>
  Either.gen(function*() {
    const { fields } = yield* commonOf(body)
    const messages = yield* Either.all((body.messages ?? []).map(messageOf))
    const tools = body.tools === undefined || body.tools.length === 0 ? undefined : body.tools.map(toolOf)
    return { messages, ...fields, ...(tools === undefined ? {} : { tools }) }
  })

/** `/api/generate` with a prompt: through the chat template as one user turn, or `raw`. */
export const generateRequest = (body: Wire.GenerateRequest & { readonly prompt: string }): Either.Either<GenerateRequest, Refusal> =>
  Either.gen(function*() {
    if (body.suffix !== undefined && body.suffix !== "") {
      yield* refuse("suffix", "suffix is not supported: nativegen's models have no fill-in-the-middle template")
    }
    if (body.images !== undefined && body.images.length > 0) {
      yield* refuse("images", "images are not supported: nativegen serves text models")
    }
    if (body.template !== undefined && body.template !== "") {
      yield* refuse("template", "template is not supported: nativegen renders with the model's own chat template")
    }
    if (body.context !== undefined && body.context.length > 0) {
      yield* refuse(
        "context",
        `context is not supported: use /api/chat with the history as messages (and the ${conversationHeader} header to reuse the cache)`
      )
    }
    if (body.raw === true && body.system !== undefined && body.system !== "") {
      yield* refuse("raw", "raw mode does not support template, system, or context")
    }
    const { fields } = yield* commonOf(body)
    if (body.raw === true) return { messages: [], prompt: body.prompt, ...fields }
    const messages: Array<ChatMessage> = [
      ...(body.system === undefined || body.system === "" ? [] : [{ role: "system" as const, content: body.system }]),
      { role: "user", content: body.prompt }
    ]
    return { messages, ...fields }
  })

/** The conversation key a request names in the header (none: a plain generation). */
export const conversationKeyOf = (headers: Readonly<Record<string, string | undefined>>): Either.Either<string | undefined, Refusal> => {
  const key = headers[conversationHeader]
  if (key === undefined) return Either.right(undefined)
  return key.length === 0 || key.length > MAX_KEY_LENGTH
    ? refuse(conversationHeader, `the ${conversationHeader} header must be 1 to ${MAX_KEY_LENGTH} characters`)
    : Either.right(key)
}

/** Provider field names (`maxTokens`, `sampling.topP`) as Ollama's clients name them. */
export const ollamaField = (field: string): string =>
  field
    .replace(/^maxTokens/, "options.num_predict")
    .replace(/^sampling\.temperature/, "options.temperature")
    .replace(/^sampling\.topK/, "options.top_k")
    .replace(/^sampling\.topP/, "options.top_p")
    .replace(/^sampling\.seed/, "options.seed")
    .replace(/^stop/, "options.stop")
    .replace(/^responseFormat(\.schema)?/, "format")
    .replace(/^thinking/, "think")
    .replace(/^probabilities/, "logprobs")
    .replace(/^topProbabilities/, "top_logprobs")
    .replace(/\.toolCalls/, ".tool_calls")
    .replace(/\.toolCallId/, ".tool_call_id")
    .replace(/\.reasoning/, ".thinking")
