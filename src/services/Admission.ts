/**
 * Admission: every byte a model's weights, a context's KV cache and compute buffers, or a
 * request's transient workspace will take on the device is charged here before it is allocated.
 *
 * - The device budget comes from the DeviceInventory (free memory of the GPU, or free RAM for the
 *   CPU backend, as the first engine child reported it) minus headroom, or from an explicit cap.
 *   It is read when first needed: the service is built before any child has said hello.
 * - Charges are scoped leases kept by the ledger (admission/Ledger.ts): weights and KV fit now or
 *   fail; workspace waits in lane order with a strict head of line.
 * - Context admission asks the engine (through the planner it is given) for each role's native
 *   allocation plan over the candidate sizes and picks the contexts with the pure planner
 *   (admission/ContextPlanner.ts). The worker's side (charging each incarnation's resident roles)
 *   is the live WorkerAdmission layer (admission/WorkerAdmissionLive.ts).
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import type * as Scope from "effect/Scope"
import type { EngineError, EngineUnavailable } from "../domain/EngineError.js"
import type { Role } from "../native/Protocol.js"
import { AdmissionConfig, validate } from "./admission/AdmissionConfig.js"
import { type Admitted, candidateSizes, planContexts, type RolePlanInput } from "./admission/ContextPlanner.js"
import * as Ledger from "./admission/Ledger.js"
import {
  ContextAdmissionFailed,
  ContextExceeded,
  type InsufficientDeviceMemory,
  type InvalidCharge,
  InvalidContextCap,
  RoleNotAdmitted,
  RoleShortfall,
  type WorkspaceTooLarge
} from "./AdmissionError.js"
import { DeviceInventory } from "./DeviceInventory.js"
import type { Planner } from "./worker/WorkerHooks.js"

export type { Admitted, AdmittedRole, LimitedBy, PlanMargin } from "./admission/ContextPlanner.js"
export { AdmissionConfig, type AdmissionConfigShape } from "./admission/AdmissionConfig.js"
export {
  type DeviceBudget,
  deviceBudget,
  type Lease,
  type LeaseStatus,
  type WaiterStatus,
  type WorkspaceRequest
} from "./admission/Ledger.js"
export { LeaseKind } from "./AdmissionError.js"
export { DeviceInventory, selectDevice } from "./DeviceInventory.js"
export { Lane } from "../native/Protocol.js"

/** The engine's native allocation plan: the NativeWorker's `plan`, or the starting child's. */
export type { Planner }

export interface AdmissionStatus extends Ledger.LedgerStatus {
  /** The contexts admitted for the resident roles, once context admission ran. */
  readonly admitted: Admitted | undefined
}

/** A resident role to admit: which model and how many parallel sequences its context has. */
export interface RoleRequest {
  readonly modelPath: string
  /** Parallel sequences (slots) in the role's context. Default 1. */
  readonly sequences?: number | undefined
  /** Overrides the configured cap for this role. */
  readonly cap?: number | undefined
}

export class Admission extends Context.Tag("nativegen/Admission")<Admission, {
  /** The budgeted device, once the inventory is published. */
  readonly device: Effect.Effect<Ledger.DeviceBudget>
  /** Charges resident weights or a context's KV cache now; fails at once if it does not fit. */
  readonly charge: (
    kind: "weights" | "kv",
    label: string,
    bytes: number
  ) => Effect.Effect<Ledger.Lease, InsufficientDeviceMemory | InvalidCharge, Scope.Scope>
  /** Charges an admitted role's weights and KV (with margin) for as long as the scope lives. */
  readonly chargeResident: (
    role: Role
  ) => Effect.Effect<
    { readonly weights: Ledger.Lease; readonly kv: Ledger.Lease },
    RoleNotAdmitted | InsufficientDeviceMemory | InvalidCharge,
    Scope.Scope
  >
  /** Charges a request's workspace, waiting in lane order until it fits. */
  readonly workspace: (
    request: Ledger.WorkspaceRequest
  ) => Effect.Effect<Ledger.Lease, WorkspaceTooLarge | InvalidCharge, Scope.Scope>
  /**
   * Compares the child's measured bytes with a live lease's charge; if the measurement is higher,
   * charges the difference (and logs it). Returns the bytes added (0 when none, or the lease is gone).
   */
  readonly reconcile: (lease: Ledger.Lease, measuredBytes: number) => Effect.Effect<number>
  readonly status: Effect.Effect<AdmissionStatus>
  /**
   * Context admission: plans each role's model over the candidate sizes with `plan` and picks
   * the contexts (largest 256-token block, or the exact cap) that fit with the workspace reservation.
   */
  readonly admitContexts: (
    roles: { readonly [R in Role]?: RoleRequest | undefined },
    plan: Planner
  ) => Effect.Effect<Admitted, ContextAdmissionFailed | InvalidContextCap | EngineError | EngineUnavailable>
  /** The contexts admitted last, if admission ran. */
  readonly admitted: Effect.Effect<Option.Option<Admitted>>
  /** The admitted context of a role, in tokens: the exact token budget of its requests. */
  readonly contextOf: (role: Role) => Effect.Effect<number, RoleNotAdmitted>
  /** Fails when a prompt plus its output budget exceeds the role's admitted context. */
  readonly checkTokens: (
    role: Role,
    promptTokens: number,
    outputTokens: number
  ) => Effect.Effect<void, ContextExceeded | RoleNotAdmitted>
}>() {}

export const make: Effect.Effect<Admission["Type"], never, AdmissionConfig | DeviceInventory> = Effect.gen(function*() {
  const config = yield* AdmissionConfig
  yield* validate(config)
  const inventory = yield* DeviceInventory
  /** The ledger over the inventory's device, made when first needed (the inventory may come later). */
  const ledger = yield* Effect.cached(
    Effect.flatMap(inventory.inventory, (published) => Ledger.make(Ledger.deviceBudget(published.device, config)))
  )
  const admitted = yield* Ref.make(Option.none<Admitted>())

  const admitContexts = Effect.fn("Admission.admitContexts")(function*(
    roles: { readonly [R in Role]?: RoleRequest | undefined },
    plan: Planner
  ) {
    const inputs: Array<RolePlanInput> = []
    for (const role of ["decision", "generation"] as const) {
      const request = roles[role]
      if (request === undefined) continue
      const cap = request.cap ?? config.contextCap[role]
      if (!Number.isSafeInteger(cap) || cap <= 0) return yield* new InvalidContextCap({ role, cap })
      const sequences = request.sequences ?? 1
      const header = yield* plan(request.modelPath, [], sequences)
      const sizes = candidateSizes(cap, header.trainedContextSize)
      inputs.push({ role, plan: yield* plan(request.modelPath, sizes, sequences), cap })
    }
    const { device, freeBytes: availableBytes } = yield* Effect.flatMap(ledger, (l) => l.status)
    const result = planContexts({
      roles: inputs,
      deviceKind: device.kind,
      availableBytes,
      reservationBytes: config.workspaceReservationBytes,
      margin: config.planMargin
    })
    if (result._tag === "Shortfall") {
      return yield* new ContextAdmissionFailed({
        availableBytes: result.shortfall.availableBytes,
        reservationBytes: result.shortfall.reservationBytes,
        roles: result.shortfall.roles.map((r) => new RoleShortfall(r))
      })
    }
    yield* Ref.set(admitted, Option.some(result.admitted))
    yield* Effect.logInfo("contexts admitted").pipe(
      Effect.annotateLogs({
        service: "Admission",
        contexts: result.admitted.roles.map((r) => `${r.role}=${r.contextSize} (${r.limitedBy})`).join(", "),
        residentBytes: result.admitted.residentBytes,
        availableBytes,
        reservationBytes: config.workspaceReservationBytes
      })
    )
    return result.admitted
  })

  const admittedRole = (role: Role) =>
    Effect.flatMap(Ref.get(admitted), (current) => {
      const found = Option.getOrUndefined(current)?.roles.find((r) => r.role === role)
      return found === undefined ? Effect.fail(new RoleNotAdmitted({ role })) : Effect.succeed(found)
    })

  const charge: Admission["Type"]["charge"] = (kind, label, bytes) => Effect.flatMap(ledger, (l) => l.charge(kind, label, bytes))

  const chargeResident = Effect.fn("Admission.chargeResident")(function*(role: Role) {
    const r = yield* admittedRole(role)
    const weights = yield* charge("weights", `${role} weights (${r.modelPath})`, r.weightsBytes)
    const kv = yield* charge("kv", `${role} context ${r.contextSize} (${r.modelPath})`, r.contextBytes)
    return { weights, kv }
  })

  const contextOf = (role: Role) => Effect.map(admittedRole(role), (r) => r.contextSize)

  const checkTokens = (role: Role, promptTokens: number, outputTokens: number) =>
    Effect.flatMap(contextOf(role), (admittedContext) =>
      promptTokens + outputTokens > admittedContext
        ? Effect.fail(new ContextExceeded({ role, promptTokens, outputTokens, admittedContext }))
        : Effect.void)

  return Admission.of({
    device: Effect.map(ledger, (l) => l.device),
    charge,
    chargeResident,
    workspace: (request) => Effect.flatMap(ledger, (l) => l.workspace(request)),
    reconcile: (lease, measuredBytes) => Effect.flatMap(ledger, (l) => l.reconcile(lease, measuredBytes)),
    status: Effect.gen(function*() {
      const status = yield* Effect.flatMap(ledger, (l) => l.status)
      return { ...status, admitted: Option.getOrUndefined(yield* Ref.get(admitted)) }
    }),
    admitContexts,
    admitted: Ref.get(admitted),
    contextOf,
    checkTokens
  })
})

/** Admission over the device the DeviceInventory publishes. */
export const layer: Layer.Layer<Admission, never, AdmissionConfig | DeviceInventory> = Layer.effect(Admission, make)
