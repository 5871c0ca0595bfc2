/**
 * The live WorkerAdmission: admission of a NativeWorker's own models. On each child's hello, its
 * inventory is published to the DeviceInventory (the first one wins: a replacement child must not
 * see the memory its dying predecessor still holds); the first time, each role's model is planned
 * on that child and its context admitted. Every incarnation then charges both roles' resident
 * memory in its own scope before loading, and reconciles with the child's measured growth after
 * each role's warm-up. The first admission's outcome (its contexts, or its typed failure) is kept
 * in FirstAdmission for the runtime's start check.
 */
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import type { EngineError } from "../../domain/EngineError.js"
import type { Role } from "../../native/Protocol.js"
import { Admission, type Lease, type RoleRequest } from "../Admission.js"
import type {
  ContextAdmissionFailed,
  DeviceNotFound,
  InsufficientDeviceMemory,
  InvalidCharge,
  InvalidContextCap,
  RoleNotAdmitted
} from "../AdmissionError.js"
import { DeviceInventory } from "../DeviceInventory.js"
import { WorkerAdmission } from "../worker/WorkerHooks.js"
import type { Admitted } from "./ContextPlanner.js"

/** Why admitting a worker's models failed (a child that failed while planning is retried instead). */
export type WorkerAdmissionError =
  | EngineError
  | DeviceNotFound
  | ContextAdmissionFailed
  | InvalidContextCap
  | InsufficientDeviceMemory
  | InvalidCharge
  | RoleNotAdmitted

/** The outcome of the first incarnation that got as far as admission. */
export class FirstAdmission extends Context.Tag("nativegen/FirstAdmission")<FirstAdmission, {
  /** The admitted contexts, or the typed refusal; waits until an incarnation reached admission. */
  readonly result: Effect.Effect<Admitted, WorkerAdmissionError>
}>() {}

/** A role's resident charges in the current incarnation. */
interface Resident {
  readonly weights: Lease
  readonly kv: Lease
}

/** The live hooks for a worker whose resident roles are `roles`, and the first admission's outcome. */
export const layer = (
  roles: { readonly [R in Role]?: RoleRequest | undefined }
): Layer.Layer<WorkerAdmission | FirstAdmission, never, Admission | DeviceInventory> =>
  Layer.effectContext(Effect.gen(function*() {
    const admission = yield* Admission
    const inventory = yield* DeviceInventory
    const first = yield* Deferred.make<Admitted, WorkerAdmissionError>()
    /** The current incarnation's leases per role (released with its scope; reconcile then adds nothing). */
    const resident = yield* Ref.make<{ readonly [R in Role]?: Resident }>({})

    const admit: WorkerAdmission["Type"]["admit"] = (hello, plan) =>
      Effect.gen(function*() {
        yield* inventory.publish(hello)
        const admitted = yield* Effect.flatMap(admission.admitted, Option.match({
          onNone: () => admission.admitContexts(roles, plan),
          onSome: Effect.succeed
        }))
        const contexts: { [R in Role]?: number } = {}
        for (const role of admitted.roles) {
          const leases = yield* admission.chargeResident(role.role)
          yield* Ref.update(resident, (current) => ({ ...current, [role.role]: leases }))
          contexts[role.role] = role.contextSize
        }
        yield* Deferred.succeed(first, admitted)
        return contexts
      }).pipe(
        // A child that died while planning is retried by the worker; every other failure is final.
        Effect.tapError((e) => (e._tag === "EngineUnavailable" ? Effect.void : Deferred.fail(first, e)))
      )

    const measured: WorkerAdmission["Type"]["measured"] = (role, growth) =>
      Effect.gen(function*() {
        const leases = (yield* Ref.get(resident))[role]
        if (leases === undefined) return
        const device = yield* admission.device
        const measuredBytes = device.kind === "cpu" ? growth.rssBytes : growth.vramBytes
        yield* admission.reconcile(leases.kv, measuredBytes - leases.weights.bytes)
        yield* Effect.logInfo("measured memory after load").pipe(
          Effect.annotateLogs({ service: "Admission", role, measuredBytes, chargedBytes: leases.weights.bytes + leases.kv.bytes })
        )
      })

    return Context.make(WorkerAdmission, { admit, measured }).pipe(
      Context.add(FirstAdmission, { result: Deferred.await(first) })
    )
  }))
