/**
 * Why a runtime did not start: `RuntimeStartError`, the error channel of `Runtime.layer` and
 * `Runtime.layerWithModels`, four cases an application can act on:
 *
 * - `StoreUnavailable`: the model store could not be opened or read (an unsafe root, a corrupt
 *   journal, an unreadable trusted key, an I/O failure); the store's error is the cause.
 * - `NoLoadableModel`: a role has nothing it can run (every candidate was passed over, or the
 *   engine refused to load it), with every reason.
 * - `ContextAdmissionFailed`: the device budget fits no context for the resident roles (the
 *   Provider's own error, with what each role needed).
 * - `EngineStartFailed`: the engine could not be brought up (the child failed before admission,
 *   reported no usable device, or refused the configuration); the original error is the cause.
 */
import * as Data from "effect/Data"
import type { Role } from "../domain/Inference.js"
import type { EngineError, EngineUnavailable, ModelLoadFailed } from "../domain/EngineError.js"
import {
  ContextAdmissionFailed,
  type DeviceNotFound,
  type InsufficientDeviceMemory,
  type InvalidCharge,
  type InvalidContextCap,
  type RoleNotAdmitted
} from "../services/AdmissionError.js"
import { InvalidKey, JournalCorrupt, StoreIoError, UnsafePath } from "../services/StoreError.js"

export { ContextAdmissionFailed } from "../services/AdmissionError.js"

/** The store's errors that keep it from opening or being read at start. */
export type StoreOpenError = JournalCorrupt | UnsafePath | StoreIoError | InvalidKey

/** The model store could not be opened or read; the store's own error is the cause. */
export class StoreUnavailable extends Data.TaggedError("StoreUnavailable")<{
  readonly cause: StoreOpenError
}> {
  override get message() {
    return `the model store cannot be used: ${this.cause.message}`
  }
}

/** A role has nothing it can run: every candidate was passed over or refused to load. */
export class NoLoadableModel extends Data.TaggedError("NoLoadableModel")<{
  readonly role: Role
  /** Why each candidate was not used, newest first. */
  readonly reasons: ReadonlyArray<string>
}> {
  override get message() {
    return `no model of role ${this.role} can be started: ${this.reasons.length === 0 ? "nothing is activated" : this.reasons.join("; ")}`
  }
}

/** What else can keep the engine from coming up: the child, its device, or admission's configuration. */
export type EngineStartCause =
  | EngineError
  | EngineUnavailable
  | ModelLoadFailed
  | DeviceNotFound
  | InsufficientDeviceMemory
  | InvalidCharge
  | InvalidContextCap
  | RoleNotAdmitted

/** The engine could not be brought up; the original error is the cause. */
export class EngineStartFailed extends Data.TaggedError("EngineStartFailed")<{
  readonly cause: EngineStartCause
}> {
  override get message() {
    return `the engine did not start: ${this.cause.message}`
  }
}

export type RuntimeStartError = StoreUnavailable | NoLoadableModel | ContextAdmissionFailed | EngineStartFailed

const isStoreOpenError = (error: unknown): error is StoreOpenError =>
  error instanceof JournalCorrupt || error instanceof UnsafePath || error instanceof StoreIoError || error instanceof InvalidKey

/**
 * Maps whatever a runtime's construction failed with onto `RuntimeStartError`: the four cases
 * pass through, store errors become `StoreUnavailable`, anything else `EngineStartFailed`.
 */
export const toStartError = (error: RuntimeStartError | StoreOpenError | EngineStartCause): RuntimeStartError => {
  if (error instanceof StoreUnavailable || error instanceof NoLoadableModel || error instanceof EngineStartFailed) return error
  if (error instanceof ContextAdmissionFailed) return error
  if (isStoreOpenError(error)) return new StoreUnavailable({ cause: error })
  return new EngineStartFailed({ cause: error })
}
