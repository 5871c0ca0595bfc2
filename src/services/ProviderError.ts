/**
 * Every way a Provider call can be refused or fail, as one Schema union of tagged errors: each
 * carries the facts a user needs (which limit, which value) and crosses the RPC boundary intact.
 */
import * as Schema from "effect/Schema"
import { EngineFailure, EngineUnavailable, GenerationFailed, TemplateError } from "../domain/EngineError.js"
import {
  ContextAdmissionFailed,
  ContextExceeded,
  RoleNotAdmitted,
  WorkspaceTooLarge
} from "./AdmissionError.js"
import { MalformedChannel } from "./ChannelDecoder.js"

/** A request field has a value the runtime cannot accept; names the field, the value and the rule. */
export class InvalidRequest extends Schema.TaggedError<InvalidRequest>()("InvalidRequest", {
  field: Schema.String,
  value: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `invalid ${this.field} ${this.value}: ${this.reason}`
  }
}

/** The scheduler's queue for a lane is full: the request was refused, not dropped later. */
export class QueueFull extends Schema.TaggedError<QueueFull>()("QueueFull", {
  lane: Schema.String,
  limit: Schema.Int
}) {
  override get message() {
    return `the ${this.lane} queue is full (${this.limit} requests waiting)`
  }
}

/** A request waited longer than the queue timeout for the engine (typically during a repair). */
export class QueueTimeout extends Schema.TaggedError<QueueTimeout>()("QueueTimeout", {
  /** The request's lane; for a call that is not queued (count, tokenize), the call. */
  lane: Schema.String,
  waitedMillis: Schema.Number,
  reason: Schema.String
}) {
  override get message() {
    return `the ${this.lane} request waited ${Math.round(this.waitedMillis)} ms without an engine: ${this.reason}`
  }
}

/** A checkpoint that does not match what the runtime holds for the conversation. */
export class InvalidCheckpoint extends Schema.TaggedError<InvalidCheckpoint>()("InvalidCheckpoint", {
  conversation: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `invalid checkpoint for conversation ${this.conversation}: ${this.reason}`
  }
}

/**
 * The engine's errors appear as their public forms only (the worker maps the child's own refusals:
 * src/services/worker/ChildErrors.ts).
 */
export const ProviderError = Schema.Union(
  EngineFailure,
  TemplateError,
  EngineUnavailable,
  GenerationFailed,
  ContextAdmissionFailed,
  ContextExceeded,
  RoleNotAdmitted,
  WorkspaceTooLarge,
  MalformedChannel,
  InvalidRequest,
  QueueFull,
  QueueTimeout,
  InvalidCheckpoint
)
export type ProviderError = typeof ProviderError.Type
