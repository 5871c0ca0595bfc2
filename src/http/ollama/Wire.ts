/**
 * Ollama's request bodies as Schemas, with Ollama's field names exactly (its `api/types.go`):
 * `/api/chat`, `/api/generate` and `/api/show`, their messages, tools, tool calls and `options`.
 * Structural only: what a value means (and whether nativegen can honour it) is decided in
 * Requests.ts. As Ollama's server does, unknown fields are ignored and `null` is read as absent.
 */
import * as Schema from "effect/Schema"

const optional = <S extends Schema.Schema.All>(schema: S) => Schema.optionalWith(schema, { nullable: true })

/** A JSON object (tool arguments, JSON schemas). */
export const JsonObject = Schema.Record({ key: Schema.String, value: Schema.Unknown })

export const ToolCall = Schema.Struct({
  id: optional(Schema.String),
  function: Schema.Struct({
    index: optional(Schema.Int),
    name: Schema.String,
    arguments: optional(JsonObject)
  })
})
export type ToolCall = typeof ToolCall.Type

export const Message = Schema.Struct({
  role: Schema.Literal("system", "user", "assistant", "tool"),
  content: optional(Schema.String),
  thinking: optional(Schema.String),
  images: optional(Schema.Array(Schema.String)),
  tool_calls: optional(Schema.Array(ToolCall)),
  tool_name: optional(Schema.String),
  tool_call_id: optional(Schema.String)
})
export type Message = typeof Message.Type

export const Tool = Schema.Struct({
  type: Schema.Literal("function"),
  function: Schema.Struct({
    name: Schema.String,
    description: optional(Schema.String),
    parameters: optional(JsonObject)
  })
})
export type Tool = typeof Tool.Type

/** `"json"`, a JSON schema, or `""` (none). */
export const Format = Schema.Union(Schema.Literal("json", ""), JsonObject).annotations({
  message: () => "expected \"json\" or a JSON schema object"
})
export type Format = typeof Format.Type

/** `true`/`false`, or a thinking level (which nativegen refuses: its templates take none). */
export const Think = Schema.Union(Schema.Boolean, Schema.Literal("low", "medium", "high", "max"))
export type Think = typeof Think.Type

/** Seconds, or a Go duration (`"5m"`, `"1h30m"`, `"-1"`). */
export const KeepAlive = Schema.Union(Schema.Number, Schema.String)
export type KeepAlive = typeof KeepAlive.Type

/** The runner and sampling options of Ollama's Modelfile, typed; others are ignored, as Ollama does. */
export const Options = Schema.Struct({
  // Sampling nativegen honours.
  temperature: optional(Schema.Number),
  top_k: optional(Schema.Int),
  top_p: optional(Schema.Number),
  seed: optional(Schema.Int),
  num_predict: optional(Schema.Int),
  stop: optional(Schema.Array(Schema.String)),
  // Sampling nativegen does not do: accepted at their neutral value only.
  min_p: optional(Schema.Number),
  typical_p: optional(Schema.Number),
  tfs_z: optional(Schema.Number),
  repeat_penalty: optional(Schema.Number),
  presence_penalty: optional(Schema.Number),
  frequency_penalty: optional(Schema.Number),
  mirostat: optional(Schema.Int),
  // Meaningless without the above, and load-time settings the runtime decides: accepted, ignored.
  repeat_last_n: optional(Schema.Int),
  penalize_newline: optional(Schema.Boolean),
  mirostat_tau: optional(Schema.Number),
  mirostat_eta: optional(Schema.Number),
  num_keep: optional(Schema.Int),
  num_ctx: optional(Schema.Int),
  num_batch: optional(Schema.Int),
  num_gpu: optional(Schema.Int),
  main_gpu: optional(Schema.Int),
  num_thread: optional(Schema.Int),
  draft_num_predict: optional(Schema.Int),
  numa: optional(Schema.Boolean),
  low_vram: optional(Schema.Boolean),
  f16_kv: optional(Schema.Boolean),
  logits_all: optional(Schema.Boolean),
  vocab_only: optional(Schema.Boolean),
  use_mmap: optional(Schema.Boolean),
  use_mlock: optional(Schema.Boolean),
  embedding_only: optional(Schema.Boolean)
})
export type Options = typeof Options.Type

/** What chat and generate share. */
const common = {
  model: Schema.String,
  format: optional(Format),
  options: optional(Options),
  stream: optional(Schema.Boolean),
  think: optional(Think),
  keep_alive: optional(KeepAlive),
  logprobs: optional(Schema.Boolean),
  top_logprobs: optional(Schema.Int)
}

export const ChatRequest = Schema.Struct({
  ...common,
  messages: optional(Schema.Array(Message)),
  tools: optional(Schema.Array(Tool))
})
export type ChatRequest = typeof ChatRequest.Type

export const GenerateRequest = Schema.Struct({
  ...common,
  prompt: optional(Schema.String),
  suffix: optional(Schema.String),
  system: optional(Schema.String),
  template: optional(Schema.String),
  context: optional(Schema.Array(Schema.Int)),
  raw: optional(Schema.Boolean),
  images: optional(Schema.Array(Schema.String))
})
export type GenerateRequest = typeof GenerateRequest.Type

/** `/api/show`: `model` (older clients send `name`). */
export const ShowRequest = Schema.Struct({
  model: optional(Schema.String),
  name: optional(Schema.String),
  verbose: optional(Schema.Boolean)
})
export type ShowRequest = typeof ShowRequest.Type
