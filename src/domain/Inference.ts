/**
 * The public inference vocabulary: what the Provider takes and returns, as Effect Schemas, so the
 * same types serve embedders (Effect API), the RPC group (wire format) and the command line. Host
 * and engine protocol share the basic pieces (roles, lanes, chat messages, sampling) from here.
 */
import * as Schema from "effect/Schema"

export const Role = Schema.Literal("generation", "decision")
export type Role = typeof Role.Type

/** Scheduling lanes, highest priority first. */
export const Lane = Schema.Literal("decision", "foreground", "utility", "preparation")
export type Lane = typeof Lane.Type

/** The lanes a caller may ask a generation to run in. */
export const GenerationLane = Schema.Literal("foreground", "utility")
export type GenerationLane = typeof GenerationLane.Type

export const ChatRole = Schema.Literal("system", "user", "assistant", "tool")
export type ChatRole = typeof ChatRole.Type

/** A JSON value as it crosses the wire (tool parameters, tool-call arguments). */
export const JsonObject = Schema.Record({ key: Schema.String, value: Schema.Unknown })
export type JsonObject = typeof JsonObject.Type

/** A tool call an assistant made earlier in the chat (history for the template). */
export const ChatToolCall = Schema.Struct({
  id: Schema.optional(Schema.String),
  name: Schema.String,
  arguments: JsonObject
})
export type ChatToolCall = typeof ChatToolCall.Type

export const ChatMessage = Schema.Struct({
  role: ChatRole,
  content: Schema.String,
  /** An assistant message's thought (the template's `reasoning_content`), kept apart from its content. */
  reasoning: Schema.optional(Schema.String),
  /** An assistant message's tool calls (the template's `tool_calls`). */
  toolCalls: Schema.optional(Schema.Array(ChatToolCall)),
  /** A tool message: the id of the call it answers (the template's `tool_call_id`). */
  toolCallId: Schema.optional(Schema.String)
})
export type ChatMessage = typeof ChatMessage.Type

/**
 * A tool the model may call: passed to the chat template as `tools`, in the OpenAI shape Qwen's
 * and most templates expect (`{type: "function", function: {name, description, parameters}}`).
 */
export const ToolDefinition = Schema.Struct({
  name: Schema.String,
  description: Schema.optional(Schema.String),
  /** A JSON schema of the arguments, an object schema (`{type: "object", properties, ...}`). */
  parameters: JsonObject
})
export type ToolDefinition = typeof ToolDefinition.Type

export const Sampling = Schema.Struct({
  /** 0 is greedy. */
  temperature: Schema.Number,
  topK: Schema.optional(Schema.Int),
  topP: Schema.optional(Schema.Number),
  seed: Schema.optional(Schema.Int)
})
export type Sampling = typeof Sampling.Type

/** Output channels: the model's thinking, its answer, and tool calls. */
export const Channel = Schema.Literal("thought", "answer", "tool")
export type Channel = typeof Channel.Type

/**
 * Proof of what a conversation's sequence holds after a turn: its token count and a hash of those
 * tokens. Handing it back on the next turn lets the runtime reuse the cached prompt and output.
 */
export const Checkpoint = Schema.Struct({
  conversation: Schema.String,
  tokens: Schema.NonNegativeInt,
  hash: Schema.String
})
export type Checkpoint = typeof Checkpoint.Type

/**
 * Structured output, decoded under a grammar in the engine: `json` is any JSON object; `jsonSchema`
 * is an object matching a JSON schema (the subset node-llama-cpp's JSON-schema grammar expresses:
 * type, properties, additionalProperties, min/maxProperties, items, prefixItems, min/maxItems,
 * enum, const, oneOf, $ref into $defs, string min/maxLength and date/time formats). Every listed
 * object property is produced (the grammar makes them all required). Thinking is disabled for such
 * a request: the grammar covers the whole output. Cut by maxTokens, the text is not valid JSON.
 */
export const ResponseFormat = Schema.Union(
  Schema.Struct({ type: Schema.Literal("json") }),
  Schema.Struct({ type: Schema.Literal("jsonSchema"), schema: Schema.Record({ key: Schema.String, value: Schema.Unknown }) })
)
export type ResponseFormat = typeof ResponseFormat.Type

export const GenerateRequest = Schema.Struct({
  messages: Schema.Array(ChatMessage),
  /**
   * Plain text for the model to continue, without the chat template (its special-token texts are
   * read as those tokens): for completion APIs. `messages` must then be empty; no checkpoint.
   */
  prompt: Schema.optional(Schema.String),
  /** Conversation id: turns of one conversation share a sequence and its cache. */
  conversation: Schema.optional(Schema.String),
  /** The checkpoint the previous turn of this conversation ended with. */
  checkpoint: Schema.optional(Checkpoint),
  /**
   * Most tokens to generate. Absent: until the model stops or the admitted context is full (the
   * context the rendered prompt leaves); a prompt that fills the context alone is refused.
   */
  maxTokens: Schema.optional(Schema.Int),
  sampling: Schema.optional(Sampling),
  /** Generation stops before any of these strings; the stop string is not returned. */
  stop: Schema.optional(Schema.Array(Schema.String)),
  lane: Schema.optional(GenerationLane),
  /** Report each generated token's probability (under the sampling options) on its Text chunk. */
  probabilities: Schema.optional(Schema.Boolean),
  /**
   * With probabilities: also the N most probable tokens at each step (0 to MAX_TOP_PROBABILITIES),
   * as each Text chunk's `candidates`.
   */
  topProbabilities: Schema.optional(Schema.Int),
  /** Tools the model may call (names unique); its calls come back as ToolCall chunks. */
  tools: Schema.optional(Schema.Array(ToolDefinition)),
  /** False asks the template to skip thinking (Qwen3's `enable_thinking`); absent leaves it to the template. */
  thinking: Schema.optional(Schema.Boolean),
  /** Constrain the answer to JSON (any object, or a JSON schema) with a grammar in the engine. */
  responseFormat: Schema.optional(ResponseFormat)
})
export type GenerateRequest = typeof GenerateRequest.Type

/**
 * Every way a generation stops, one literal set: the engine stops at max tokens, at the end of
 * generation or on a stop token (src/domain/Generation.ts); the host stops on a stop string, or
 * reports `toolCalls` when the turn ended after at least one well-formed tool call. The public
 * reason is its subset below (a stop token is reported as the end of generation).
 */
export const GenerationStop = Schema.Literal("maxTokens", "endOfGeneration", "stopToken", "stopString", "toolCalls")
export type GenerationStop = typeof GenerationStop.Type

export const StopReason = GenerationStop.pipe(Schema.pickLiteral("maxTokens", "endOfGeneration", "stopString", "toolCalls"))
export type StopReason = typeof StopReason.Type

/** How much of the prompt came from cache, and from which kind of reuse. */
export const ReuseKind = Schema.Literal("continuation", "prefix", "restored", "prepared", "cold")
export type ReuseKind = typeof ReuseKind.Type

export const Usage = Schema.Struct({
  promptTokens: Schema.NonNegativeInt,
  reusedTokens: Schema.NonNegativeInt,
  generatedTokens: Schema.NonNegativeInt,
  reuse: ReuseKind
})
export type Usage = typeof Usage.Type

export const Timings = Schema.Struct({
  /** From submission until the engine ran the request's first step. */
  queueMillis: Schema.Number,
  /** From submission until the first generated token. */
  firstTokenMillis: Schema.Number,
  /** Generated tokens per second after the first. */
  decodeTokensPerSecond: Schema.Number,
  totalMillis: Schema.Number
})
export type Timings = typeof Timings.Type

/** One of the most probable tokens at a step: its id, its text and its probability. */
export const TokenCandidate = Schema.Struct({
  token: Schema.NonNegativeInt,
  text: Schema.String,
  probability: Schema.Number
})
export type TokenCandidate = typeof TokenCandidate.Type

export const GenerateChunk = Schema.Union(
  /** Text of one channel, with the tokens behind it (markers never appear). */
  Schema.TaggedStruct("Text", {
    channel: Channel,
    text: Schema.String,
    tokens: Schema.Array(Schema.NonNegativeInt),
    /** Per token, its probability when the request asked for them. */
    probabilities: Schema.optional(Schema.Array(Schema.Number)),
    /** Per token, its own text, when the request asked for probabilities. */
    tokenTexts: Schema.optional(Schema.Array(Schema.String)),
    /** Per token, the most probable tokens at its step (most probable first), when asked for. */
    candidates: Schema.optional(Schema.Array(Schema.Array(TokenCandidate)))
  }),
  /** A tool call the model made: the tool's name and its parsed JSON arguments. */
  Schema.TaggedStruct("ToolCall", {
    /** Unique within the generation; a tool message answering it may name it (`toolCallId`). */
    id: Schema.String,
    name: Schema.String,
    arguments: JsonObject,
    tokens: Schema.Array(Schema.NonNegativeInt)
  }),
  /**
   * A tool call whose text is not a call (not JSON, or not `{"name": string, "arguments": object}`):
   * the text as generated and why. The generation goes on; what follows is not lost.
   */
  Schema.TaggedStruct("MalformedToolCall", {
    text: Schema.String,
    reason: Schema.String,
    tokens: Schema.Array(Schema.NonNegativeInt)
  }),
  /** The last chunk of every successful generation. */
  Schema.TaggedStruct("Done", {
    stopReason: StopReason,
    usage: Usage,
    timings: Timings,
    checkpoint: Schema.optional(Checkpoint),
    /**
     * With stopReason "maxTokens": the channel the limit cut while it was open (its text so far
     * was delivered). Absent when the output ended in the answer channel.
     */
    truncatedChannel: Schema.optional(Schema.Literal("thought", "tool"))
  })
)
export type GenerateChunk = typeof GenerateChunk.Type

export const DecisionHead = Schema.Struct({ name: Schema.String, labels: Schema.Array(Schema.String) })
export type DecisionHead = typeof DecisionHead.Type

export const DecideRequest = Schema.Struct({
  /** Plain text, or messages rendered through the decision model's chat template. */
  prompt: Schema.Union(Schema.String, Schema.Array(ChatMessage)),
  heads: Schema.Array(DecisionHead)
})
export type DecideRequest = typeof DecideRequest.Type

export const LabelDecision = Schema.Struct({
  label: Schema.String,
  probability: Schema.Number,
  /** 1 is the most probable. */
  rank: Schema.Int,
  /** Teacher-forced log-likelihood of the label after the prompt, in nats. */
  logLikelihood: Schema.Number
})
export type LabelDecision = typeof LabelDecision.Type

/** A decision head with each label's decision. */
export const HeadDecision = Schema.Struct({ ...DecisionHead.fields, labels: Schema.Array(LabelDecision) })
export type HeadDecision = typeof HeadDecision.Type

export const DecideResult = Schema.Struct({
  heads: Schema.Array(HeadDecision),
  promptTokens: Schema.NonNegativeInt,
  queueMillis: Schema.Number,
  totalMillis: Schema.Number
})
export type DecideResult = typeof DecideResult.Type

export const CountRequest = Schema.Struct({
  role: Schema.optional(Role),
  /** Messages are counted through the model's chat template (with the assistant prompt). */
  messages: Schema.optional(Schema.Array(ChatMessage)),
  /** Plain text is counted as it would be tokenized (no template, no special tokens). */
  text: Schema.optional(Schema.String)
})
export type CountRequest = typeof CountRequest.Type

export const CountResult = Schema.Struct({
  role: Role,
  tokens: Schema.NonNegativeInt,
  /** The role's admitted context: prompt + max tokens must not exceed it. */
  admittedContext: Schema.NonNegativeInt
})
export type CountResult = typeof CountResult.Type

/** What to tokenize: the same choice as a count (messages through the template, or plain text). */
export const TokenizeRequest = CountRequest
export type TokenizeRequest = typeof TokenizeRequest.Type

export const TokenizeResult = Schema.Struct({
  role: Role,
  /** The exact token ids the role model would be given. */
  tokens: Schema.Array(Schema.NonNegativeInt),
  /** The role's admitted context: prompt + max tokens must not exceed it. */
  admittedContext: Schema.NonNegativeInt
})
export type TokenizeResult = typeof TokenizeResult.Type

/** A conversation's expected next prompt, prefilled while the engine is idle. */
export const PrepareRequest = Schema.Struct({
  conversation: Schema.String,
  /** The standing prefix (system prompt, tools): rarely changes. */
  prefix: Schema.Array(ChatMessage),
  /** The known history after the prefix. */
  history: Schema.Array(ChatMessage)
})
export type PrepareRequest = typeof PrepareRequest.Type

export const PrepareResult = Schema.Struct({
  conversation: Schema.String,
  preparedTokens: Schema.NonNegativeInt,
  totalTokens: Schema.NonNegativeInt,
  /** False when preparation was preempted before the whole prompt was prefilled. */
  complete: Schema.Boolean
})
export type PrepareResult = typeof PrepareResult.Type

/** One finished generation, for plots of throughput and latency over the last requests. */
export const GenerationSample = Schema.Struct({
  /** When its Done chunk was made (ISO 8601). */
  finishedAt: Schema.String,
  lane: Lane,
  stopReason: StopReason,
  promptTokens: Schema.NonNegativeInt,
  reusedTokens: Schema.NonNegativeInt,
  generatedTokens: Schema.NonNegativeInt,
  reuse: ReuseKind,
  firstTokenMillis: Schema.Number,
  decodeTokensPerSecond: Schema.Number,
  totalMillis: Schema.Number
})
export type GenerationSample = typeof GenerationSample.Type

export const EngineState = Schema.Literal("starting", "loading", "warming", "ready", "repairing", "failed", "stopped")
export type EngineState = typeof EngineState.Type

export const Readiness = Schema.Struct({
  state: EngineState,
  /** Why the state is what it is, when it is not ready. */
  reason: Schema.NullOr(Schema.String),
  engine: Schema.Struct({
    incarnation: Schema.Int,
    pid: Schema.NullOr(Schema.Int),
    backend: Schema.NullOr(Schema.String),
    nodeLlamaCppVersion: Schema.NullOr(Schema.String),
    uptimeMillis: Schema.Number,
    /** The engine child's evaluation threads (the count used, also for "auto"). */
    threads: Schema.optional(Schema.Int),
    /** The llama.cpp build the engine child loaded: "localBuild" (`nativegen engine build`) or "prebuilt". */
    build: Schema.optional(Schema.NullOr(Schema.String)),
    /** The GPU driver's version, where the child reads one (NVIDIA). */
    driverVersion: Schema.optional(Schema.NullOr(Schema.String)),
    /** The devices the engine child sees, each with its total and free memory when it started. */
    devices: Schema.optional(Schema.Array(Schema.Struct({
      name: Schema.String,
      kind: Schema.Literal("cpu", "gpu"),
      totalBytes: Schema.Number,
      freeBytes: Schema.Number
    })))
  }),
  budget: Schema.NullOr(Schema.Struct({
    device: Schema.String,
    kind: Schema.Literal("cpu", "gpu"),
    source: Schema.Literal("inventory", "cap"),
    totalBytes: Schema.Number,
    budgetBytes: Schema.Number,
    chargedBytes: Schema.Number,
    freeBytes: Schema.Number,
    waiting: Schema.Int,
    /** The charged bytes by kind: resident weights, KV caches (with what measurement added), request workspace. */
    weightsBytes: Schema.Number,
    kvBytes: Schema.Number,
    workspaceBytes: Schema.Number
  })),
  roles: Schema.Array(Schema.Struct({
    role: Role,
    /** The model's name: its store name, or its file name without `.gguf` when loaded by path. */
    model: Schema.String,
    modelPath: Schema.String,
    manifestDigest: Schema.NullOr(Schema.String),
    revision: Schema.NullOr(Schema.Int),
    admittedContext: Schema.NullOr(Schema.Int),
    contextCap: Schema.NullOr(Schema.Int),
    /** Why the admitted context is below the cap, when it is. */
    limitedBy: Schema.NullOr(Schema.Literal("cap", "trainedContext", "budget")),
    /** Bytes charged for the role's weights and for its context (KV cache and compute buffers) at admission. */
    weightsBytes: Schema.NullOr(Schema.Number),
    kvBytes: Schema.NullOr(Schema.Number)
  })),
  scheduler: Schema.Struct({
    running: Schema.Int,
    queued: Schema.Int,
    slots: Schema.Int,
    conversations: Schema.Int,
    /** Running and queued requests per lane, from the highest priority to the lowest. */
    lanes: Schema.optional(Schema.Array(Schema.Struct({ lane: Lane, running: Schema.Int, queued: Schema.Int })))
  }),
  recoveryActions: Schema.Array(Schema.Struct({
    at: Schema.String,
    kind: Schema.String,
    reason: Schema.String,
    outcome: Schema.String
  })),
  /** The last generations that finished (oldest first, at most RECENT_GENERATIONS), as their Done chunks measured them. */
  recentGenerations: Schema.optional(Schema.Array(GenerationSample))
})
export type Readiness = typeof Readiness.Type
