/**
 * Errors of the engine domain: what the engine child refuses and why. They are Schema tagged
 * errors because they cross the host<->child protocol (and later the public RPC) intact.
 */
import * as Schema from "effect/Schema"

/** A request field had a value the engine cannot accept; names the field, the value and the rule. */
export class InvalidEngineRequest extends Schema.TaggedError<InvalidEngineRequest>()("InvalidEngineRequest", {
  field: Schema.String,
  value: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `invalid ${this.field} ${this.value}: ${this.reason}`
  }
}

/** A role was used that has no model loaded. */
export class RoleNotLoaded extends Schema.TaggedError<RoleNotLoaded>()("RoleNotLoaded", {
  role: Schema.String
}) {
  override get message() {
    return `no model is loaded for role ${this.role}`
  }
}

/** A model could not be loaded or inspected (missing file, not GGUF, out of memory). */
export class ModelLoadFailed extends Schema.TaggedError<ModelLoadFailed>()("ModelLoadFailed", {
  modelPath: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `cannot load model ${this.modelPath}: ${this.reason}`
  }
}

/** A generation id the child does not know (never begun, or already ended). */
export class UnknownGeneration extends Schema.TaggedError<UnknownGeneration>()("UnknownGeneration", {
  generationId: Schema.String
}) {
  override get message() {
    return `unknown generation ${this.generationId}`
  }
}

/** The native engine failed in a way that is not the request's fault. */
export class EngineFailure extends Schema.TaggedError<EngineFailure>()("EngineFailure", {
  operation: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `engine failed during ${this.operation}: ${this.reason}`
  }
}

/**
 * A model's own chat template failed: it raised (`raise_exception`), used a value it was not
 * given, or does not parse. Names the model and the template's message; the engine stays up.
 */
export class TemplateError extends Schema.TaggedError<TemplateError>()("TemplateError", {
  role: Schema.String,
  modelPath: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `the chat template of the ${this.role} model ${this.modelPath} failed: ${this.reason}`
  }
}

export const EngineError = Schema.Union(
  InvalidEngineRequest,
  RoleNotLoaded,
  ModelLoadFailed,
  UnknownGeneration,
  EngineFailure,
  TemplateError
)
export type EngineError = typeof EngineError.Type

/** The engine child cannot serve right now (it died, broke its protocol, or is being repaired). */
export class EngineUnavailable extends Schema.TaggedError<EngineUnavailable>()("EngineUnavailable", {
  reason: Schema.String
}) {
  override get message() {
    return `engine unavailable: ${this.reason}`
  }
}

/** A generation was streaming when its engine child failed; it is not retried (nothing is served twice). */
export class GenerationFailed extends Schema.TaggedError<GenerationFailed>()("GenerationFailed", {
  deliveredTokens: Schema.Int,
  reason: Schema.String
}) {
  override get message() {
    return `generation failed after ${this.deliveredTokens} delivered tokens: ${this.reason}`
  }
}
