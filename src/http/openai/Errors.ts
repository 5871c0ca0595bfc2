/**
 * A Provider error as OpenAI's client reads it: the shared classification (Refusals.ts) with the
 * field renamed into OpenAI's vocabulary (`sampling.topP` is `top_p`, `tools[0].name` is
 * `tools[0].function.name`) and a context overflow worded as OpenAI words it, with the numbers.
 */
import type { ProviderError } from "../../services/ProviderError.js"
import { type Refusal, refusalOf } from "../Refusals.js"
import type { ParamNames } from "./ToGenerate.js"

/** Where the conversation key came from (a header or the body's `prompt_cache_key`). */
export type KeySource = "X-Nativegen-Conversation" | "prompt_cache_key"

/** nativegen's field paths as OpenAI's request names them (beyond the per-endpoint names). */
const renames: ReadonlyArray<readonly [RegExp, string]> = [
  [/^sampling\.temperature$/, "temperature"],
  [/^sampling\.topP$/, "top_p"],
  [/^sampling\.seed$/, "seed"],
  [/^tools\[(\d+)\]\.(name|description|parameters)/, "tools[$1].function.$2"],
  [/^messages\[(\d+)\]\.toolCallId/, "messages[$1].tool_call_id"],
  [/^messages\[(\d+)\]\.toolCalls/, "messages[$1].tool_calls"],
  [/^messages\[(\d+)\]\.reasoning/, "messages[$1].reasoning_content"],
  [/^responseFormat\.schema/, "response_format.json_schema.schema"],
  [/^request$/, "body"]
]

export const paramOf = (field: string, params: ParamNames, key: KeySource | undefined): string => {
  if (field === "maxTokens" || field === "messages" || field === "topProbabilities") return params[field]
  if (field === "conversation") return key ?? "prompt_cache_key"
  for (const [pattern, replacement] of renames) {
    if (pattern.test(field)) return field.replace(pattern, replacement)
  }
  return field
}

export const refusalFor = (
  error: ProviderError,
  options: { readonly params: ParamNames; readonly key: KeySource | undefined; readonly retryAfterSeconds: number }
): Refusal => {
  const refusal = refusalOf(error, options.retryAfterSeconds)
  if (error._tag === "ContextExceeded") {
    const requested = error.promptTokens + error.outputTokens
    return {
      ...refusal,
      param: options.params.messages,
      message: `This model's maximum context length is ${error.admittedContext} tokens. However, you requested ` +
        `${requested} tokens (${error.promptTokens} in the ${options.params.messages}, ${error.outputTokens} in the completion). ` +
        `Please reduce the length of the ${options.params.messages} or completion.`
    }
  }
  return refusal.param === null ? refusal : { ...refusal, param: paramOf(refusal.param, options.params, options.key) }
}
