/**
 * What a finished generation reports beside its output, in three shapes: OpenAI's `usage` (reused
 * prompt tokens as `cached_tokens`, thought tokens as `reasoning_tokens`), llama-server's
 * `timings`, and a `nativegen` object with the reuse kind and the runtime's own measures. All are
 * derived from the Done chunk (and the thought tokens counted on the way).
 */
import type { GenerateChunk } from "../../domain/Inference.js"

export type Done = Extract<GenerateChunk, { readonly _tag: "Done" }>

export const usageOf = (done: Done, reasoningTokens: number) => ({
  prompt_tokens: done.usage.promptTokens,
  completion_tokens: done.usage.generatedTokens,
  total_tokens: done.usage.promptTokens + done.usage.generatedTokens,
  prompt_tokens_details: { cached_tokens: done.usage.reusedTokens },
  completion_tokens_details: { reasoning_tokens: reasoningTokens }
})

const perSecond = (n: number, millis: number) => (n > 0 && millis > 0 ? (n * 1000) / millis : 0)
const perToken = (millis: number, n: number) => (n > 0 ? millis / n : 0)

/**
 * llama-server's timings, as it defines them: the prompt is what was evaluated (not reused), timed
 * from the engine's first step to the first generated token; generation is every generated token,
 * timed from the first token to the end.
 */
export const timingsOf = (done: Done) => {
  const { timings, usage } = done
  const promptN = usage.promptTokens - usage.reusedTokens
  const promptMs = Math.max(0, timings.firstTokenMillis - timings.queueMillis)
  const predictedN = usage.generatedTokens
  const predictedMs = Math.max(0, timings.totalMillis - timings.firstTokenMillis)
  return {
    cache_n: usage.reusedTokens,
    prompt_n: promptN,
    prompt_ms: promptMs,
    prompt_per_token_ms: perToken(promptMs, promptN),
    prompt_per_second: perSecond(promptN, promptMs),
    predicted_n: predictedN,
    predicted_ms: predictedMs,
    predicted_per_token_ms: perToken(predictedMs, predictedN),
    predicted_per_second: perSecond(predictedN, predictedMs)
  }
}

/** nativegen's own report: the kind of reuse, the queue wait, and the decode rate after the first token. */
export const nativegenOf = (done: Done) => ({
  reuse: done.usage.reuse,
  reused_tokens: done.usage.reusedTokens,
  queue_ms: done.timings.queueMillis,
  first_token_ms: done.timings.firstTokenMillis,
  total_ms: done.timings.totalMillis,
  decode_tokens_per_second: done.timings.decodeTokensPerSecond,
  stop_reason: done.stopReason,
  ...(done.truncatedChannel === undefined ? {} : { truncated_channel: done.truncatedChannel })
})

/** OpenAI's finish reason for a stop reason: `length` at max tokens, `tool_calls` after calls, else `stop`. */
export const finishReasonOf = (done: Done, calledTools: boolean) =>
  done.stopReason === "maxTokens" ? "length" : done.stopReason === "toolCalls" || calledTools ? "tool_calls" : "stop"
