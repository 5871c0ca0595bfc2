/**
 * What a NativeWorker reports about itself: its states, the recovery actions it took (a bounded
 * log), and the readiness view built from the current incarnation and the configured roles.
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Ref from "effect/Ref"
import type { EngineState } from "../../domain/Inference.js"
import type { DeviceInfo, HelloInfo, LoadedModel, Role } from "../../native/Protocol.js"
import type { NativeWorkerConfigShape, RoleModel } from "./NativeWorkerConfig.js"

export interface RecoveryAction {
  readonly at: Date
  /** `trust`: an activation passed over; `load`: a role's model the engine refused to load. */
  readonly kind: "exit" | "hang" | "protocol" | "start" | "admission" | "budget" | "repair-request" | "trust" | "load"
  readonly reason: string
  readonly outcome: "replaced" | "failed" | "gave-up" | "pending" | "fell-back"
}

export interface WorkerReadiness {
  readonly state: EngineState
  /** Why the state is what it is, when it is not ready. */
  readonly reason: string | undefined
  readonly incarnation: number
  readonly pid: number | undefined
  readonly backend: string | undefined
  readonly devices: ReadonlyArray<DeviceInfo>
  readonly hello: HelloInfo | undefined
  readonly models: ReadonlyArray<LoadedModel>
  /** Per role: the host-owned revision and the admitted context. */
  readonly roles: ReadonlyArray<{
    readonly role: Role
    readonly modelPath: string
    readonly revision: RoleModel["revision"]
    readonly admittedContext: number | undefined
  }>
  readonly uptimeMillis: number
  readonly recoveryActions: ReadonlyArray<RecoveryAction>
  /**
   * When the engine refused to load a role's model (a typed failure of the load, not a crash):
   * which role and why. The worker does not restart for it (it would only repeat); another model
   * for the role can be tried. Cleared when a child starts.
   */
  readonly loadFailure: { readonly role: Role; readonly reason: string } | undefined
}

/** The recovery actions taken, oldest first, at most `length` of them. */
export interface RecoveryLog {
  readonly append: (action: Omit<RecoveryAction, "at">) => Effect.Effect<void>
  readonly entries: Effect.Effect<ReadonlyArray<RecoveryAction>>
}

export const makeRecoveryLog = (
  initial: ReadonlyArray<RecoveryAction>,
  length: number
): Effect.Effect<RecoveryLog> =>
  Effect.map(Ref.make(initial), (actions) => ({
    append: (action) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) =>
        Ref.update(actions, (list) => [...list, { ...action, at: new Date(now) }].slice(-length))),
    entries: Ref.get(actions)
  }))

/** What readiness is made of: the supervisor's view of its current child, and the worker's records. */
export interface ReadinessSource {
  readonly state: EngineState
  readonly reason: string | undefined
  /** The serving child, if any. */
  readonly current:
    | { readonly number: number; readonly pid: number; readonly hello: HelloInfo; readonly models: ReadonlyArray<LoadedModel> }
    | undefined
  /** The last incarnation number given out. */
  readonly incarnations: number
  readonly uptimeMillis: number
  readonly recoveryActions: ReadonlyArray<RecoveryAction>
  readonly loadFailure: WorkerReadiness["loadFailure"]
}

export const view = (models: NativeWorkerConfigShape["models"], source: ReadinessSource): WorkerReadiness => {
  const loaded = source.current?.models ?? []
  return {
    state: source.state,
    reason: source.reason,
    incarnation: source.current?.number ?? source.incarnations,
    pid: source.current?.pid,
    backend: source.current?.hello.backend,
    devices: source.current?.hello.devices ?? [],
    hello: source.current?.hello,
    models: loaded,
    roles: (["generation", "decision"] as const).flatMap((role) => {
      const model = models[role]
      return model === undefined ? [] : [{
        role,
        modelPath: model.modelPath,
        revision: model.revision,
        admittedContext: loaded.find((m) => m.role === role)?.contextSize
      }]
    }),
    uptimeMillis: source.uptimeMillis,
    recoveryActions: source.recoveryActions,
    loadFailure: source.loadFailure
  }
}
