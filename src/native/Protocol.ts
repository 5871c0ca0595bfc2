/**
 * The host<->engine-child protocol: one @effect/rpc group, msgpack-framed over a Unix socket pair
 * (the child's fd 3). Every message is an Effect Schema, so a malformed message is a decoding
 * failure of the child, never a crash of the host. This module is shared by both sides and must
 * not import node-llama-cpp.
 *
 * Generation is split so that the host decides which step runs next: `Begin` registers a
 * generation (prompt, sampling, limits) on a sequence, `Advance` streams its steps (prefill chunks
 * and decode tokens, each with its index) until it finishes, and interrupting `Advance` pauses it
 * at the next step boundary. A later `Advance` resumes from the index the host last received;
 * the child replays what the host may have missed, so nothing is lost or repeated. `End` frees it.
 * The first `Advance` may carry its `Begin` (one request, one round trip to set a generation up).
 */
import * as Rpc from "@effect/rpc/Rpc"
import * as RpcGroup from "@effect/rpc/RpcGroup"
import * as Schema from "effect/Schema"
import { EngineError } from "../domain/EngineError.js"
import { GenerationEvent, ScoreEvent, TokenGenerateRequest, TokenId, Tokens } from "../domain/Generation.js"
import { ChatMessage, DecisionHead, Role, ToolDefinition } from "../domain/Inference.js"

export const PROTOCOL_VERSION = 1

/**
 * Decode steps the child may run ahead of the host's acknowledgements. A pause or cancel lands
 * at most this many steps (plus the one in flight) after the host's last received token; the
 * tokens produced meanwhile are kept and replayed on resume, never lost.
 */
export const DECODE_RUN_AHEAD = 8

/**
 * Decoded tokens leave the child in messages of up to this many while the host keeps up (more
 * when it is behind): below DECODE_RUN_AHEAD + 1, so decoding goes on while a message is
 * acknowledged. Every message costs each process on its way about the same CPU, whatever it carries.
 */
export const DECODE_MESSAGE_TOKENS = 4

/**
 * The longest a decoded token waits in the child for others to share its message: a token leaves
 * at once when no message left in the last this many milliseconds (the first token, a slow model),
 * and no later than this after the last message otherwise. The generation's end leaves at once.
 */
export const DECODE_MESSAGE_INTERVAL_MS = 30

export { ChatMessage, ChatRole, DecisionHead, Lane, Role, Sampling, ToolDefinition } from "../domain/Inference.js"
export {
  AdvanceEvent,
  EngineStopReason,
  HeadScore,
  LabelScore,
  ScoreEvent,
  TokenGenerateRequest,
  Tokens
} from "../domain/Generation.js"

export const Backend = Schema.Literal("cpu", "cuda", "vulkan", "metal")
export type Backend = typeof Backend.Type

const Bytes = Schema.NonNegativeInt

export class DeviceInfo extends Schema.Class<DeviceInfo>("DeviceInfo")({
  name: Schema.String,
  kind: Schema.Literal("cpu", "gpu"),
  totalBytes: Bytes,
  freeBytes: Bytes
}) {}

export class HelloInfo extends Schema.Class<HelloInfo>("HelloInfo")({
  protocolVersion: Schema.Int,
  nodeLlamaCppVersion: Schema.String,
  llamaCppRelease: Schema.String,
  backend: Backend,
  /** Which llama.cpp binary the child loaded: node-llama-cpp's "localBuild" (`nativegen engine build`) or "prebuilt". */
  build: Schema.optionalWith(Schema.String, { default: () => "unknown" }),
  threads: Schema.Int,
  pid: Schema.Int,
  devices: Schema.Array(DeviceInfo),
  /** The GPU driver's version where it reports one (NVIDIA: /proc/driver/nvidia/version). */
  driverVersion: Schema.optional(Schema.String)
}) {}

/** What the child process really holds now: its resident set, and device memory in use (GPU). */
export class MemoryReading extends Schema.Class<MemoryReading>("MemoryReading")({
  rssBytes: Bytes,
  /** VRAM in use on the child's GPU: its own where the driver lists processes (CUDA, nvidia-smi), else device-wide; 0 on CPU. */
  vramUsedBytes: Bytes
}) {}

/** Native memory estimate split by where it lives. */
export class MemoryEstimate extends Schema.Class<MemoryEstimate>("MemoryEstimate")({
  cpuBytes: Bytes,
  gpuBytes: Bytes
}) {}

const noBytes = () => new MemoryEstimate({ cpuBytes: 0, gpuBytes: 0 })

export class ContextPlan extends Schema.Class<ContextPlan>("ContextPlan")({
  contextSize: Schema.Int,
  /** KV cache and compute buffers for this context size. */
  context: MemoryEstimate,
  /**
   * Bytes of `context` that the engine's use never touches (on the CPU backend, the rows of the
   * compute buffer's logits reserve beyond the outputs a batch asks for: allocated, never resident).
   */
  untouched: Schema.optionalWith(MemoryEstimate, { default: noBytes })
}) {}

/** The native allocation plan of a model over candidate context sizes, without loading it. */
export class ModelPlan extends Schema.Class<ModelPlan>("ModelPlan")({
  modelPath: Schema.String,
  trainedContextSize: Schema.Int,
  weights: MemoryEstimate,
  /** Bytes a loaded model holds beyond its weights and contexts (its vocabulary's structures), as estimated. */
  overhead: Schema.optionalWith(MemoryEstimate, { default: noBytes }),
  contexts: Schema.Array(ContextPlan)
}) {}

/** Token ids the host needs to decode channels, from the model's own vocabulary. */
export class SpecialTokens extends Schema.Class<SpecialTokens>("SpecialTokens")({
  bos: Schema.NullOr(TokenId),
  eos: Schema.NullOr(TokenId),
  thinkOpen: Schema.NullOr(TokenId),
  thinkClose: Schema.NullOr(TokenId),
  toolOpen: Schema.NullOr(TokenId),
  toolClose: Schema.NullOr(TokenId)
}) {}

export class LoadedModel extends Schema.Class<LoadedModel>("LoadedModel")({
  role: Role,
  modelPath: Schema.String,
  contextSize: Schema.Int,
  sequences: Schema.Int,
  trainedContextSize: Schema.Int,
  /** Measured after load: the model's resident bytes and the context's bytes. */
  measured: Schema.Struct({ modelBytes: Bytes, contextBytes: Bytes }),
  specialTokens: SpecialTokens
}) {}

/** Loading streams its progress, so the host can tell a slow load from a stuck one. */
export const LoadEvent = Schema.Union(
  Schema.TaggedStruct("LoadProgress", { fraction: Schema.Number }),
  Schema.TaggedStruct("Loaded", { model: LoadedModel })
)
export type LoadEvent = typeof LoadEvent.Type

/** Begin's payload: the token-level request, plus the generation's id and the prefill chunk size. */
export const BeginRequest = Schema.Struct({
  ...TokenGenerateRequest.fields,
  generationId: Schema.String,
  prefillChunk: Schema.Int
})
export type BeginRequest = typeof BeginRequest.Type

/** What a chat template reads beside the messages: the tools offered, and whether to think. */
export const TemplateInputs = Schema.Struct({
  tools: Schema.optional(Schema.Array(ToolDefinition)),
  /** The template's `enable_thinking`; absent leaves it undefined. */
  thinking: Schema.optional(Schema.Boolean)
})
export type TemplateInputs = typeof TemplateInputs.Type

export class EngineRpcs extends RpcGroup.make(
  Rpc.make("Hello", { success: HelloInfo }),
  Rpc.make("Memory", { success: MemoryReading }),
  Rpc.make("Plan", {
    payload: { modelPath: Schema.String, contextSizes: Schema.Array(Schema.Int), sequences: Schema.Int },
    success: ModelPlan,
    error: EngineError
  }),
  Rpc.make("Load", {
    payload: { role: Role, modelPath: Schema.String, contextSize: Schema.Int, sequences: Schema.Int },
    success: LoadEvent,
    error: EngineError,
    stream: true
  }),
  Rpc.make("Unload", { payload: { role: Role }, error: EngineError }),
  Rpc.make("Tokenize", {
    payload: { role: Role, text: Schema.String, specialTokens: Schema.Boolean },
    success: Tokens,
    error: EngineError
  }),
  Rpc.make("Detokenize", { payload: { role: Role, tokens: Tokens }, success: Schema.String, error: EngineError }),
  Rpc.make("Render", {
    payload: {
      role: Role,
      messages: Schema.Array(ChatMessage),
      /** Default true: end with the assistant prompt. */
      addGenerationPrompt: Schema.optional(Schema.Boolean),
      ...TemplateInputs.fields
    },
    success: Tokens,
    error: EngineError
  }),
  /** The chat as text through the template; without the assistant prompt when `addGenerationPrompt` is false. */
  Rpc.make("RenderText", {
    payload: { role: Role, messages: Schema.Array(ChatMessage), addGenerationPrompt: Schema.Boolean, ...TemplateInputs.fields },
    success: Schema.String,
    error: EngineError
  }),
  /**
   * The tokens a continued turn adds after the held ones (src/domain/Continuation.ts): the
   * template's close of the last assistant turn and the new turn, found from the renders of
   * `history` (through its last assistant message) and `turn`, and tokenized, all in the child in
   * one request; or why the template does not render turns one after another.
   */
  Rpc.make("RenderContinuation", {
    payload: { role: Role, history: Schema.Array(ChatMessage), turn: Schema.Array(ChatMessage), inputs: TemplateInputs, turnInputs: TemplateInputs },
    success: Schema.Union(Schema.Struct({ tokens: Tokens }), Schema.Struct({ refused: Schema.String })),
    error: EngineError
  }),
  /** Writes a generation sequence's KV state (and its tokens) to a file. */
  Rpc.make("SaveState", {
    payload: { sequence: Schema.Int, path: Schema.String },
    success: Schema.Struct({ fileBytes: Schema.NonNegativeInt, tokens: Schema.NonNegativeInt }),
    error: EngineError
  }),
  /** Replaces a generation sequence's KV state with a file's; the host has verified the file first. */
  Rpc.make("RestoreState", {
    payload: { sequence: Schema.Int, path: Schema.String },
    success: Schema.Struct({ tokens: Schema.NonNegativeInt }),
    error: EngineError
  }),
  Rpc.make("Begin", {
    payload: BeginRequest,
    success: Schema.Struct({ reusedTokens: Schema.Int }),
    error: EngineError
  }),
  /**
   * With `begin` (its id the generation's, `fromIndex` 0), Begin and Advance in one request: the
   * stream starts with Started (in the first step's message), and a Begin that fails fails it.
   */
  Rpc.make("Advance", {
    payload: { generationId: Schema.String, fromIndex: Schema.Int, begin: Schema.optional(BeginRequest) },
    success: GenerationEvent,
    error: EngineError,
    stream: true
  }),
  Rpc.make("End", { payload: { generationId: Schema.String } }),
  /** Scores labels on the decision model; the prompt is prefilled in chunks of `prefillChunk` tokens. */
  Rpc.make("Score", {
    payload: { prompt: Tokens, heads: Schema.Array(DecisionHead), prefillChunk: Schema.Int },
    success: ScoreEvent,
    error: EngineError,
    stream: true
  }),
  Rpc.make("Shutdown", {})
) {}
