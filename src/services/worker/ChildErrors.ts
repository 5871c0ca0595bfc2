/**
 * The child's own errors, mapped to public ones at the worker: what crosses the engine protocol
 * (src/domain/EngineError.ts) includes the child's bookkeeping refusals (an unknown generation, a
 * role with no model, a request field the engine refuses), which must not reach the public RPC.
 * A refused field is the caller's InvalidRequest (same field, value and rule); a role with no
 * model means the engine cannot serve it now (EngineUnavailable); the rest is an EngineFailure.
 * A failed template (TemplateError) and an EngineFailure pass through unchanged.
 */
import {
  type EngineError,
  EngineFailure,
  EngineUnavailable,
  type TemplateError
} from "../../domain/EngineError.js"
import { InvalidRequest } from "../ProviderError.js"

/** What a worker call fails with, past the worker. */
export type WorkerError = EngineFailure | TemplateError | InvalidRequest | EngineUnavailable

/** Maps one of the child's errors (or the worker's EngineUnavailable) to its public error. */
export const publicError = (error: EngineError | EngineUnavailable): WorkerError => {
  switch (error._tag) {
    case "InvalidEngineRequest":
      return new InvalidRequest({ field: error.field, value: error.value, reason: error.reason })
    case "RoleNotLoaded":
      return new EngineUnavailable({ reason: error.message })
    case "UnknownGeneration":
      return new EngineFailure({ operation: "advance", reason: error.message })
    case "ModelLoadFailed":
      return new EngineFailure({ operation: "load", reason: error.message })
    case "EngineFailure":
    case "TemplateError":
    case "EngineUnavailable":
      return error
  }
}
