/**
 * Every refusal of device admission, as a Schema tagged error carrying the facts a user needs:
 * which lease or role, how many bytes were asked for, and how many were available. These cross
 * the RPC boundary.
 */
import * as Schema from "effect/Schema"
import { Lane } from "../domain/Inference.js"

const Bytes = Schema.Number

const mib = (bytes: number) => `${(bytes / 1048576).toFixed(1)} MiB`

export const LeaseKind = Schema.Literal("weights", "kv", "workspace")
export type LeaseKind = typeof LeaseKind.Type

/**
 * A workspace request larger than the workspace could ever get on this device (the budget minus
 * the resident weights and KV charges). It fails at once, and never waits.
 */
export class WorkspaceTooLarge extends Schema.TaggedError<WorkspaceTooLarge>()("WorkspaceTooLarge", {
  lane: Lane,
  label: Schema.String,
  requestedBytes: Bytes,
  /** The most any workspace can get: budget minus resident charges. */
  availableBytes: Bytes,
  budgetBytes: Bytes
}) {
  override get message() {
    return `workspace ${this.label} (${this.lane}) asks for ${this.requestedBytes} bytes (${mib(this.requestedBytes)}), ` +
      `but at most ${this.availableBytes} bytes (${mib(this.availableBytes)}) of the ${this.budgetBytes}-byte budget ` +
      `can ever be free for workspace`
  }
}

/** A weights or KV charge that does not fit the device's free budget now; such charges never wait. */
export class InsufficientDeviceMemory extends Schema.TaggedError<InsufficientDeviceMemory>()(
  "InsufficientDeviceMemory",
  {
    kind: LeaseKind,
    label: Schema.String,
    requestedBytes: Bytes,
    freeBytes: Bytes,
    budgetBytes: Bytes
  }
) {
  override get message() {
    return `cannot charge ${this.kind} ${this.label}: ${this.requestedBytes} bytes (${mib(this.requestedBytes)}) asked, ` +
      `${this.freeBytes} bytes (${mib(this.freeBytes)}) free of a ${this.budgetBytes}-byte budget`
  }
}

/** A request for a charge that is not a non-negative whole number of bytes. */
export class InvalidCharge extends Schema.TaggedError<InvalidCharge>()("InvalidCharge", {
  label: Schema.String,
  bytes: Schema.Number
}) {
  override get message() {
    return `invalid charge for ${this.label}: ${this.bytes} is not a non-negative whole number of bytes`
  }
}

/** A context cap that is not a positive whole number of tokens. */
export class InvalidContextCap extends Schema.TaggedError<InvalidContextCap>()("InvalidContextCap", {
  role: Schema.Literal("generation", "decision"),
  cap: Schema.Number
}) {
  override get message() {
    return `invalid ${this.role} context cap ${this.cap}: it must be a positive whole number of tokens`
  }
}

/** What one role needed at its cheapest context and what the budget left for it. */
export class RoleShortfall extends Schema.Class<RoleShortfall>("RoleShortfall")({
  role: Schema.Literal("generation", "decision"),
  modelPath: Schema.String,
  /** The cheapest candidate context in tokens (0: the role had no candidate at all). */
  contextSize: Schema.Number,
  /** Weights plus KV and compute at that context, with the plan margin. */
  neededBytes: Bytes,
  /** Available bytes minus the reservation minus every other role's cheapest need. */
  availableBytes: Bytes
}) {}

/** No context of any size fits: the resident roles at their smallest contexts exceed the budget. */
export class ContextAdmissionFailed extends Schema.TaggedError<ContextAdmissionFailed>()("ContextAdmissionFailed", {
  roles: Schema.Array(RoleShortfall),
  /** Budget minus what was already charged when admission ran. */
  availableBytes: Bytes,
  reservationBytes: Bytes
}) {
  override get message() {
    const roles = this.roles.map((r) =>
      `${r.role} (${r.modelPath}) needs ${r.neededBytes} bytes (${mib(r.neededBytes)}) at ${r.contextSize} tokens, ` +
      `${r.availableBytes} bytes (${mib(r.availableBytes)}) available`
    )
    return `no context fits the device: ${roles.join("; ")} ` +
      `(${this.availableBytes} bytes available, ${this.reservationBytes} reserved for workspace)`
  }
}

/** A request whose prompt plus output budget exceeds the role's admitted context. */
export class ContextExceeded extends Schema.TaggedError<ContextExceeded>()("ContextExceeded", {
  role: Schema.Literal("generation", "decision"),
  promptTokens: Schema.Number,
  outputTokens: Schema.Number,
  admittedContext: Schema.Number
}) {
  override get message() {
    return `${this.promptTokens} prompt tokens + ${this.outputTokens} output tokens exceed the admitted ` +
      `${this.role} context of ${this.admittedContext} tokens`
  }
}

/** A role was used that context admission has not admitted (not configured, or admission not run). */
export class RoleNotAdmitted extends Schema.TaggedError<RoleNotAdmitted>()("RoleNotAdmitted", {
  role: Schema.Literal("generation", "decision")
}) {
  override get message() {
    return `no context has been admitted for role ${this.role}`
  }
}

/** The engine's inventory names no device of the kind its backend uses. */
export class DeviceNotFound extends Schema.TaggedError<DeviceNotFound>()("DeviceNotFound", {
  backend: Schema.String,
  devices: Schema.Array(Schema.String)
}) {
  override get message() {
    return `the ${this.backend} engine reported no usable device (devices: ${this.devices.join(", ") || "none"})`
  }
}
