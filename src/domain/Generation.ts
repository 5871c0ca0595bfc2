/**
 * The engine-level generation vocabulary, declared once and used unchanged by the NativeWorker,
 * the host<->child protocol and the child: the token-level generation request, the events of a
 * generation (the child streams a subset of them), the engine's stop reasons, and the per-label
 * scores of a decision. The public vocabulary (src/domain/Inference.ts) derives from the same
 * pieces where the shapes meet (stop reasons, decision heads, label scores).
 */
import * as Schema from "effect/Schema"
import { DecisionHead, GenerationStop, Lane, LabelDecision, Sampling, TokenCandidate } from "./Inference.js"
import { TokenArray } from "./TokenArray.js"

export const TokenId = Schema.NonNegativeInt
/** Token ids: an array in memory, one byte string on the wire (src/domain/TokenArray.ts). */
export const Tokens = TokenArray

/** A generation at the token level: the prompt as tokens, on one generation sequence (slot). */
export const TokenGenerateRequest = Schema.Struct({
  prompt: Tokens,
  maxTokens: Schema.Int,
  sampling: Sampling,
  stopTokens: Schema.optional(Tokens),
  /** The generation-role sequence (slot) to run on. Default 0. */
  sequence: Schema.optional(Schema.Int),
  /** The lane its steps queue in at the engine's step gate. Default foreground. */
  lane: Schema.optional(Lane),
  /** Only prefill the prompt into the sequence (preparation): no token is sampled. */
  prefillOnly: Schema.optional(Schema.Boolean),
  /** Report each sampled token's probability on its Token event. */
  confidence: Schema.optional(Schema.Boolean),
  /**
   * With confidence: also the N most probable tokens at each step (most probable first, with their
   * texts) on its Token event. 0 or absent: none.
   */
  topProbabilities: Schema.optional(Schema.Int),
  /**
   * Reuse only whole prefill chunks of the cached prefix: the rest is prefilled in the same batches
   * as a cold run, so probabilities are bit-identical to it when the kept part was prefilled too.
   */
  reuseOnGrid: Schema.optional(Schema.Boolean),
  /**
   * Sample under the grammar of this JSON schema (its JSON text, the grammar cache's key): the
   * output is one JSON value matching it, then only an end-of-generation token is allowed.
   */
  jsonSchema: Schema.optional(Schema.String)
})
export type TokenGenerateRequest = typeof TokenGenerateRequest.Type

/** Why the engine finished a generation: the public reasons less `stopString` (the host's), plus `stopToken`. */
export const EngineStopReason = GenerationStop.pipe(Schema.pickLiteral("maxTokens", "endOfGeneration", "stopToken"))
export type EngineStopReason = typeof EngineStopReason.Type

/** The generation was registered on its sequence; its cache already held `reusedTokens` of the prompt. */
export const Started = Schema.TaggedStruct("Started", { reusedTokens: Schema.Int })
/** A prompt chunk was prefilled: `done` of `total` prompt tokens are in the cache. */
export const Prefilled = Schema.TaggedStruct("Prefilled", { done: Schema.Int, total: Schema.Int })
export const Token = Schema.TaggedStruct("Token", {
  index: Schema.Int,
  token: TokenId,
  text: Schema.String,
  /** The token's probability under the sampling options, when asked for. */
  confidence: Schema.optional(Schema.Number),
  /** The most probable tokens at this step (most probable first), when asked for. */
  candidates: Schema.optional(Schema.Array(TokenCandidate))
})
export const Finished = Schema.TaggedStruct("Finished", { reason: EngineStopReason, generated: Schema.Int })

/** The steps the child streams for a generation (after Begin answered with its reuse). */
export const AdvanceEvent = Schema.Union(Prefilled, Token, Finished)
export type AdvanceEvent = typeof AdvanceEvent.Type

/**
 * A generation's events as the worker streams them. `Started` comes first; when the child fails
 * before the first token was delivered, the generation starts again on the replacement and
 * `Started` (with that child's reuse) comes once more, followed by its steps from the beginning.
 */
export const GenerationEvent = Schema.Union(Started, ...AdvanceEvent.members)
export type GenerationEvent = typeof GenerationEvent.Type

/** One label's score: the public decision plus how many tokens the label has. */
export const LabelScore = Schema.Struct({ ...LabelDecision.fields, tokens: Schema.Int })
export type LabelScore = typeof LabelScore.Type

/** A decision head with each of its labels scored. */
export const HeadScore = Schema.Struct({ ...DecisionHead.fields, labels: Schema.Array(LabelScore) })
export type HeadScore = typeof HeadScore.Type

/** A score's progress: one Prefilled per prompt chunk (the host's step deadline is per event), then Scored. */
export const ScoreEvent = Schema.Union(Prefilled, Schema.TaggedStruct("Scored", { heads: Schema.Array(HeadScore) }))
export type ScoreEvent = typeof ScoreEvent.Type
