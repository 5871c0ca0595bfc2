/**
 * The request bodies of `/v1/chat/completions` and `/v1/completions`, as far as nativegen reads
 * them: structural schemas (a field of the wrong JSON type is refused, naming it), every field
 * optional where OpenAI's is and `null` read as absent. Fields not listed are ignored. The rules
 * between fields (roles, part types, `n`, tool choice) are checked where the request is mapped.
 */
import * as Schema from "effect/Schema"

/** Absent or null. */
const optional = <S extends Schema.Schema.Any>(schema: S) => Schema.optional(Schema.NullOr(schema))

const JsonRecord = Schema.Record({ key: Schema.String, value: Schema.Unknown })

/** A content part: only `text` parts are read; the type is checked when mapped. */
export const ContentPart = Schema.Struct({ type: Schema.String, text: optional(Schema.String) })
export type ContentPart = typeof ContentPart.Type

export const Content = Schema.Union(Schema.String, Schema.Array(ContentPart))
export type Content = typeof Content.Type

export const ToolCallIn = Schema.Struct({
  id: optional(Schema.String),
  type: optional(Schema.String),
  function: Schema.Struct({ name: Schema.String, arguments: Schema.String })
})

export const Message = Schema.Struct({
  role: Schema.String,
  content: optional(Content),
  reasoning_content: optional(Schema.String),
  tool_calls: optional(Schema.Array(ToolCallIn)),
  tool_call_id: optional(Schema.String)
})
export type Message = typeof Message.Type

export const Tool = Schema.Struct({
  type: Schema.String,
  function: Schema.Struct({
    name: Schema.String,
    description: optional(Schema.String),
    parameters: optional(JsonRecord)
  })
})
export type Tool = typeof Tool.Type

export const ToolChoice = Schema.Union(
  Schema.String,
  Schema.Struct({ type: Schema.String, function: Schema.Struct({ name: Schema.String }) })
)
export type ToolChoice = typeof ToolChoice.Type

export const ResponseFormat = Schema.Struct({
  type: Schema.String,
  json_schema: optional(Schema.Struct({ name: optional(Schema.String), schema: optional(JsonRecord) }))
})
export type ResponseFormat = typeof ResponseFormat.Type

/** What both endpoints share: the model, sampling, limits and streaming. */
const common = {
  model: optional(Schema.String),
  max_tokens: optional(Schema.Int),
  temperature: optional(Schema.Number),
  top_p: optional(Schema.Number),
  seed: optional(Schema.Int),
  stop: optional(Schema.Union(Schema.String, Schema.Array(Schema.String))),
  n: optional(Schema.Int),
  stream: optional(Schema.Boolean),
  stream_options: optional(Schema.Struct({ include_usage: optional(Schema.Boolean) })),
  /** OpenAI's key for prompt caching: nativegen's conversation key when no header names one. */
  prompt_cache_key: optional(Schema.String)
}

export const ChatCompletionRequest = Schema.Struct({
  ...common,
  messages: Schema.Array(Message),
  max_completion_tokens: optional(Schema.Int),
  logprobs: optional(Schema.Boolean),
  top_logprobs: optional(Schema.Int),
  tools: optional(Schema.Array(Tool)),
  tool_choice: optional(ToolChoice),
  response_format: optional(ResponseFormat),
  /** llama-server's and vLLM's template arguments: `enable_thinking` is read. */
  chat_template_kwargs: optional(JsonRecord),
  reasoning_effort: optional(Schema.String)
})
export type ChatCompletionRequest = typeof ChatCompletionRequest.Type

export const CompletionRequest = Schema.Struct({
  ...common,
  prompt: Schema.Union(Schema.String, Schema.Array(Schema.String)),
  /** The legacy API's logprobs: the number of most probable tokens to report at each step. */
  logprobs: optional(Schema.Int),
  echo: optional(Schema.Boolean),
  suffix: optional(Schema.String),
  best_of: optional(Schema.Int)
})
export type CompletionRequest = typeof CompletionRequest.Type
