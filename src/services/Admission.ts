/**
 * Admission: every byte a model's weights, a context's KV cache and compute buffers, or a
 * request's transient workspace will take on the device is charged here before it is allocated.
 *
 * - The device budget comes from the engine child's inventory (free memory of the GPU, or free RAM
 *   for the CPU backend) minus headroom, or from an explicit cap.
 * - Charges are scoped leases (weights, kv, workspace), released exactly once when their scope
 *   closes, interruption included. Weights and KV charges never wait: they fit now or fail.
 * - Workspace requests that do not fit wait. Waiters form one order: lane (decision, foreground,
 *   utility, preparation), then arrival. The head of that order is served as soon as it fits, and
 *   nothing behind it is served before it (strict head-of-line): a lower lane never takes memory a
 *   higher waiter is waiting for, so a waiter ahead is never starved by one behind it. A request
 *   that could never fit (more than the budget minus the resident charges) fails at once.
 * - `reconcile` charges the difference when the child measures more than was charged.
 * - Context admission asks the child for each role's native allocation plan over the candidate
 *   sizes and picks the contexts with the pure planner (admission/ContextPlanner.ts).
 */
import * as Config from "effect/Config"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import type { DeviceInfo, Lane, Role } from "../native/Protocol.js"
import {
  type Admitted,
  candidateSizes,
  type DeviceKind,
  type PlanMargin,
  planContexts,
  type RolePlanInput
} from "./admission/ContextPlanner.js"
import {
  ContextAdmissionFailed,
  ContextExceeded,
  DeviceNotFound,
  InsufficientDeviceMemory,
  InvalidCharge,
  InvalidContextCap,
  type LeaseKind,
  RoleNotAdmitted,
  RoleShortfall,
  WorkspaceTooLarge
} from "./AdmissionError.js"
import type { EngineError } from "../domain/EngineError.js"
import * as LaneQueue from "../internal/LaneQueue.js"
import { NativeWorker, type Planner, type WorkerAdmission, type WorkerError } from "./NativeWorker.js"

export type { Admitted, AdmittedRole, LimitedBy, PlanMargin } from "./admission/ContextPlanner.js"
export { LeaseKind } from "./AdmissionError.js"
export { Lane } from "../native/Protocol.js"

const MiB = 1024 * 1024

export interface AdmissionConfigShape {
  /** Bytes of the device's free memory that are never budgeted. Default 512 MiB. */
  readonly headroomBytes: number
  /**
   * An explicit device budget in bytes, used instead of free memory minus headroom (a logical
   * partition of the device). Default: none (the inventory decides).
   */
  readonly capBytes?: number | undefined
  /** Bytes context admission leaves free for per-request workspace. Default 512 MiB (the seed's six-head probes). */
  readonly workspaceReservationBytes: number
  /** Context cap in tokens per role; the exact cap is kept when it fits. Default generation 16384, decision 4096. */
  readonly contextCap: { readonly [R in Role]: number }
  /**
   * Added to the engine's plan before it is charged: `ratio` of every planned amount plus
   * `bytesPerModel` once per resident model. Default 10% and 32 MiB (docs/decisions.md, Admission).
   */
  readonly planMargin: PlanMargin
}

export class AdmissionConfig extends Context.Tag("nativegen/AdmissionConfig")<AdmissionConfig, AdmissionConfigShape>() {
  static readonly defaults: AdmissionConfigShape = {
    headroomBytes: 512 * MiB,
    workspaceReservationBytes: 512 * MiB,
    contextCap: { generation: 16384, decision: 4096 },
    planMargin: { ratio: 0.1, bytesPerModel: 32 * MiB }
  }

  static readonly layer = (config: Partial<AdmissionConfigShape>) =>
    Layer.succeed(AdmissionConfig, { ...AdmissionConfig.defaults, ...config })

  /** Reads NATIVEGEN_ADMISSION_* from the current ConfigProvider (the environment by default). */
  static readonly config: Config.Config<AdmissionConfigShape> = Config.all({
    headroomBytes: Config.integer("NATIVEGEN_ADMISSION_HEADROOM_BYTES").pipe(
      Config.withDefault(AdmissionConfig.defaults.headroomBytes),
      Config.withDescription("device memory never budgeted, in bytes")
    ),
    capBytes: Config.option(Config.integer("NATIVEGEN_ADMISSION_CAP_BYTES")).pipe(
      Config.withDescription("explicit device budget in bytes, instead of free memory minus headroom")
    ),
    workspaceReservationBytes: Config.integer("NATIVEGEN_ADMISSION_WORKSPACE_RESERVATION_BYTES").pipe(
      Config.withDefault(AdmissionConfig.defaults.workspaceReservationBytes),
      Config.withDescription("bytes context admission leaves free for request workspace")
    ),
    generationCap: Config.integer("NATIVEGEN_ADMISSION_GENERATION_CONTEXT_CAP").pipe(
      Config.withDefault(AdmissionConfig.defaults.contextCap.generation),
      Config.withDescription("context cap of the generation role, in tokens")
    ),
    decisionCap: Config.integer("NATIVEGEN_ADMISSION_DECISION_CONTEXT_CAP").pipe(
      Config.withDefault(AdmissionConfig.defaults.contextCap.decision),
      Config.withDescription("context cap of the decision role, in tokens")
    ),
    marginRatio: Config.number("NATIVEGEN_ADMISSION_PLAN_MARGIN_RATIO").pipe(
      Config.withDefault(AdmissionConfig.defaults.planMargin.ratio),
      Config.withDescription("fraction added to the engine's memory plan")
    ),
    marginBytes: Config.integer("NATIVEGEN_ADMISSION_PLAN_MARGIN_BYTES").pipe(
      Config.withDefault(AdmissionConfig.defaults.planMargin.bytesPerModel),
      Config.withDescription("bytes added per resident model to the engine's memory plan")
    )
  }).pipe(
    Config.map((c): AdmissionConfigShape => ({
      headroomBytes: c.headroomBytes,
      capBytes: Option.getOrUndefined(c.capBytes),
      workspaceReservationBytes: c.workspaceReservationBytes,
      contextCap: { generation: c.generationCap, decision: c.decisionCap },
      planMargin: { ratio: c.marginRatio, bytesPerModel: c.marginBytes }
    }))
  )

  static readonly layerConfig = Layer.effect(AdmissionConfig, AdmissionConfig.config)
}

/** A charge held on the device; it is released when the scope it was taken in closes. */
export interface Lease {
  readonly id: number
  readonly kind: LeaseKind
  /** What the charge is for (a role and model, a request id). */
  readonly label: string
  /** The lane of a workspace lease; undefined for weights and KV. */
  readonly lane: Lane | undefined
  /** Bytes charged when the lease was granted (reconcile may raise the live charge). */
  readonly bytes: number
}

/** The device whose memory is budgeted, and how the budget was set. */
export interface DeviceBudget {
  readonly name: string
  readonly kind: DeviceKind
  readonly totalBytes: number
  /** Free memory the inventory reported when admission started. */
  readonly freeBytes: number
  readonly budgetBytes: number
  /** "inventory": free memory minus headroom; "cap": the configured explicit cap. */
  readonly source: "inventory" | "cap"
}

export interface LeaseStatus {
  readonly id: number
  readonly kind: LeaseKind
  readonly label: string
  readonly lane: Lane | undefined
  /** The live charge, including what reconcile added. */
  readonly bytes: number
}

export interface WaiterStatus {
  readonly id: number
  readonly lane: Lane
  readonly label: string
  readonly bytes: number
}

export interface AdmissionStatus {
  readonly device: DeviceBudget
  readonly totalBytes: number
  readonly budgetBytes: number
  readonly chargedBytes: number
  /** Budget minus charged, never below zero (reconcile may charge past the budget). */
  readonly freeBytes: number
  readonly byKind: { readonly [K in LeaseKind]: { readonly count: number; readonly bytes: number } }
  readonly leases: ReadonlyArray<LeaseStatus>
  /** Waiting workspace requests in the order they will be served. */
  readonly waiting: ReadonlyArray<WaiterStatus>
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

export interface WorkspaceRequest {
  readonly lane: Lane
  readonly bytes: number
  /** What the workspace is for (a request id); shown in status and errors. Default "workspace". */
  readonly label?: string | undefined
}

/** The engine's native allocation plan: the NativeWorker's `plan`. */
export type { Planner }

export class Admission extends Context.Tag("nativegen/Admission")<Admission, {
  readonly device: DeviceBudget
  /** Charges resident weights or a context's KV cache now; fails at once if it does not fit. */
  readonly charge: (
    kind: "weights" | "kv",
    label: string,
    bytes: number
  ) => Effect.Effect<Lease, InsufficientDeviceMemory | InvalidCharge, Scope.Scope>
  /** Charges an admitted role's weights and KV (with margin) for as long as the scope lives. */
  readonly chargeResident: (
    role: Role
  ) => Effect.Effect<
    { readonly weights: Lease; readonly kv: Lease },
    RoleNotAdmitted | InsufficientDeviceMemory | InvalidCharge,
    Scope.Scope
  >
  /** Charges a request's workspace, waiting in lane order until it fits. */
  readonly workspace: (
    request: WorkspaceRequest
  ) => Effect.Effect<Lease, WorkspaceTooLarge | InvalidCharge, Scope.Scope>
  /**
   * Compares the child's measured bytes with a live lease's charge; if the measurement is higher,
   * charges the difference (and logs it). Returns the bytes added (0 when none, or the lease is gone).
   */
  readonly reconcile: (lease: Lease, measuredBytes: number) => Effect.Effect<number>
  readonly status: Effect.Effect<AdmissionStatus>
  /**
   * Context admission: plans each role's model over the candidate sizes in the child and picks
   * the contexts (largest 256-token block, or the exact cap) that fit with the workspace reservation.
   */
  readonly admitContexts: (
    roles: { readonly [R in Role]?: RoleRequest | undefined }
  ) => Effect.Effect<Admitted, ContextAdmissionFailed | InvalidContextCap | WorkerError>
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

/** The budget of a device: the explicit cap, or free memory minus headroom. */
export const deviceBudget = (device: DeviceInfo, config: AdmissionConfigShape): DeviceBudget => {
  const base = { name: device.name, kind: device.kind, totalBytes: device.totalBytes, freeBytes: device.freeBytes }
  return config.capBytes !== undefined
    ? { ...base, budgetBytes: config.capBytes, source: "cap" }
    : { ...base, budgetBytes: Math.max(0, device.freeBytes - config.headroomBytes), source: "inventory" }
}

const isBytes = (n: number) => Number.isSafeInteger(n) && n >= 0

interface Live {
  readonly lease: Lease
  bytes: number
}

/** A workspace request as it waits; its id becomes its lease's id when it is granted. */
interface Pending {
  readonly id: number
  readonly lane: Lane
  readonly label: string
  readonly bytes: number
}

const validateConfig = (config: AdmissionConfigShape) => {
  const problems: Array<string> = []
  if (!isBytes(config.headroomBytes)) problems.push(`headroomBytes ${config.headroomBytes}`)
  if (config.capBytes !== undefined && !isBytes(config.capBytes)) problems.push(`capBytes ${config.capBytes}`)
  if (!isBytes(config.workspaceReservationBytes)) {
    problems.push(`workspaceReservationBytes ${config.workspaceReservationBytes}`)
  }
  for (const role of ["generation", "decision"] as const) {
    const cap = config.contextCap[role]
    if (!Number.isSafeInteger(cap) || cap <= 0) problems.push(`contextCap.${role} ${cap}`)
  }
  if (!(config.planMargin.ratio >= 0 && Number.isFinite(config.planMargin.ratio))) {
    problems.push(`planMargin.ratio ${config.planMargin.ratio}`)
  }
  if (!isBytes(config.planMargin.bytesPerModel)) problems.push(`planMargin.bytesPerModel ${config.planMargin.bytesPerModel}`)
  return problems.length === 0
    ? Effect.void
    : Effect.dieMessage(`invalid admission configuration: ${problems.join(", ")}`)
}

/** Builds Admission for a known device, with a planner for context admission. */
export const makeWith = (options: { readonly device: DeviceInfo; readonly plan: Planner }) =>
  Effect.gen(function*() {
    const config = yield* AdmissionConfig
    yield* validateConfig(config)
    const device = deviceBudget(options.device, config)
    const budget = device.budgetBytes
    if (device.source === "cap" && budget > device.freeBytes) {
      yield* Effect.logWarning("admission cap exceeds the device's free memory").pipe(
        Effect.annotateLogs({ service: "Admission", capBytes: budget, freeBytes: device.freeBytes })
      )
    }

    const live = new Map<number, Live>()
    let charged = 0
    /** Weights and KV: what workspace can never use while they are held. */
    let resident = 0
    let nextId = 1
    let admitted: Admitted | undefined

    const workspaceCeiling = () => Math.max(0, budget - resident)

    const tooLarge = (lane: Lane, label: string, bytes: number) =>
      new WorkspaceTooLarge({
        lane,
        label,
        requestedBytes: bytes,
        availableBytes: workspaceCeiling(),
        budgetBytes: budget
      })

    const open = (kind: LeaseKind, label: string, lane: Lane | undefined, bytes: number, id = nextId++): Lease => {
      const lease: Lease = { id, kind, label, lane, bytes }
      live.set(lease.id, { lease, bytes })
      charged += bytes
      if (kind !== "workspace") resident += bytes
      return lease
    }

    /** Removes a live lease's charge; a second release of the same lease does nothing. */
    const free = (id: number) => {
      const l = live.get(id)
      if (l === undefined) return
      live.delete(id)
      charged -= l.bytes
      if (l.lease.kind !== "workspace") resident -= l.bytes
    }

    /**
     * Workspace waiters: served in lane order while the head fits; a waiter that could never fit
     * (more than the budget minus the resident charges) fails instead of waiting forever.
     */
    const waiters = LaneQueue.make<Pending, Lease, WorkspaceTooLarge>({
      take: (w) => (charged + w.bytes > budget ? undefined : open("workspace", w.label, w.lane, w.bytes, w.id)),
      give: (lease) => free(lease.id),
      refuse: (w) => (w.bytes > workspaceCeiling() ? tooLarge(w.lane, w.label, w.bytes) : undefined)
    })

    const release = (lease: Lease) =>
      Effect.sync(() => {
        free(lease.id)
        waiters.unsafeDispatch()
      })

    const workspace = Effect.fn("Admission.workspace")(function*(request: WorkspaceRequest) {
      const label = request.label ?? "workspace"
      if (!isBytes(request.bytes)) return yield* new InvalidCharge({ label, bytes: request.bytes })
      return yield* waiters.acquire(request.lane, { id: nextId++, lane: request.lane, label, bytes: request.bytes })
    })

    const charge = Effect.fn("Admission.charge")(function*(kind: "weights" | "kv", label: string, bytes: number) {
      if (!isBytes(bytes)) return yield* new InvalidCharge({ label, bytes })
      return yield* Effect.acquireRelease(
        Effect.suspend(() => {
          if (charged + bytes > budget) {
            return Effect.fail(
              new InsufficientDeviceMemory({
                kind,
                label,
                requestedBytes: bytes,
                freeBytes: Math.max(0, budget - charged),
                budgetBytes: budget
              })
            )
          }
          const lease = open(kind, label, undefined, bytes)
          // Waiters that can no longer ever fit fail now rather than wait forever.
          waiters.unsafeDispatch()
          return Effect.succeed(lease)
        }),
        release
      )
    })

    const reconcile = Effect.fn("Admission.reconcile")(function*(lease: Lease, measuredBytes: number) {
      const change = yield* Effect.sync(() => {
        const l = live.get(lease.id)
        if (l === undefined || !(measuredBytes > l.bytes)) return undefined
        const added = Math.ceil(measuredBytes - l.bytes)
        const before = l.bytes
        l.bytes += added
        charged += added
        if (l.lease.kind !== "workspace") resident += added
        waiters.unsafeDispatch()
        return { added, before, after: l.bytes }
      })
      if (change === undefined) return 0
      yield* Effect.logWarning("measured memory exceeds the charge; charging the difference").pipe(
        Effect.annotateLogs({
          service: "Admission",
          lease: lease.label,
          kind: lease.kind,
          chargedBytes: change.before,
          measuredBytes,
          addedBytes: change.added,
          totalChargedBytes: charged,
          budgetBytes: budget
        })
      )
      return change.added
    })

    const status = Effect.sync((): AdmissionStatus => {
      const byKind = {
        weights: { count: 0, bytes: 0 },
        kv: { count: 0, bytes: 0 },
        workspace: { count: 0, bytes: 0 }
      }
      const leases: Array<LeaseStatus> = []
      for (const l of live.values()) {
        byKind[l.lease.kind].count += 1
        byKind[l.lease.kind].bytes += l.bytes
        leases.push({ id: l.lease.id, kind: l.lease.kind, label: l.lease.label, lane: l.lease.lane, bytes: l.bytes })
      }
      const waiting = waiters.waiting().map((w): WaiterStatus => ({ id: w.id, lane: w.lane, label: w.label, bytes: w.bytes }))
      return {
        device,
        totalBytes: device.totalBytes,
        budgetBytes: budget,
        chargedBytes: charged,
        freeBytes: Math.max(0, budget - charged),
        byKind,
        leases,
        waiting,
        admitted
      }
    })

    const admitContexts = Effect.fn("Admission.admitContexts")(function*(
      roles: { readonly [R in Role]?: RoleRequest | undefined }
    ) {
      const inputs: Array<RolePlanInput> = []
      for (const role of ["decision", "generation"] as const) {
        const request = roles[role]
        if (request === undefined) continue
        const cap = request.cap ?? config.contextCap[role]
        if (!Number.isSafeInteger(cap) || cap <= 0) return yield* new InvalidContextCap({ role, cap })
        const sequences = request.sequences ?? 1
        const header = yield* options.plan(request.modelPath, [], sequences)
        const sizes = candidateSizes(cap, header.trainedContextSize)
        const plan = yield* options.plan(request.modelPath, sizes, sequences)
        inputs.push({ role, plan, cap })
      }
      const availableBytes = Math.max(0, budget - charged)
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
      admitted = result.admitted
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
      Effect.suspend(() => {
        const found = admitted?.roles.find((r) => r.role === role)
        return found === undefined ? Effect.fail(new RoleNotAdmitted({ role })) : Effect.succeed(found)
      })

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
      device,
      charge,
      chargeResident,
      workspace,
      reconcile,
      status,
      admitContexts,
      admitted: Effect.sync(() => Option.fromNullable(admitted)),
      contextOf,
      checkTokens
    })
  })

/** The device of an engine's inventory that its backend allocates on. */
export const selectDevice = (
  backend: string,
  devices: ReadonlyArray<DeviceInfo>
): Effect.Effect<DeviceInfo, DeviceNotFound> => {
  const kind = backend === "cpu" ? "cpu" : "gpu"
  const found = devices.find((d) => d.kind === kind)
  return found === undefined
    ? Effect.fail(new DeviceNotFound({ backend, devices: devices.map((d) => `${d.name} (${d.kind})`) }))
    : Effect.succeed(found)
}

/** Admission for the NativeWorker's device, planning through the worker's child. */
export const make: Effect.Effect<Admission["Type"], DeviceNotFound, AdmissionConfig | NativeWorker> = Effect.gen(
  function*() {
    const worker = yield* NativeWorker
    const ready = yield* worker.readiness
    const device = yield* selectDevice(ready.backend ?? "unknown", ready.devices)
    return yield* makeWith({ device, plan: worker.plan })
  }
)

export const layer: Layer.Layer<Admission, DeviceNotFound, AdmissionConfig | NativeWorker> = Layer.effect(
  Admission,
  make
)

/** Admission for a fixed device and planner (tests, or a runtime that owns the inventory itself). */
export const layerWith = (options: { readonly device: DeviceInfo; readonly plan: Planner }) =>
  Layer.effect(Admission, makeWith(options))

/** Why admitting a worker's models failed before the service existed. */
export type WorkerAdmissionError = EngineError | DeviceNotFound | ContextAdmissionFailed | InvalidContextCap | InsufficientDeviceMemory | InvalidCharge | RoleNotAdmitted

/**
 * Admission of a NativeWorker's own models. `hooks` go into the worker's configuration: on the
 * first child's hello, the device budget is read from its inventory (once: a replacement child
 * must not see the memory its dying predecessor still holds), each role's model is planned and its
 * context admitted; every incarnation then charges both roles' resident memory in its own scope
 * before loading, and reconciles with the child's measured growth after each role's warm-up.
 * `admission` is the service, once the first admission has run (or its typed failure).
 */
export const forWorker = (roles: { readonly [R in Role]?: RoleRequest | undefined }) =>
  Effect.gen(function*() {
    const config = yield* AdmissionConfig
    const ready = yield* Deferred.make<Admission["Type"], WorkerAdmissionError>()
    let admission: Admission["Type"] | undefined
    let planner: Planner | undefined
    const resident = new Map<Role, { readonly weights: Lease; readonly kv: Lease }>()

    const admitOnce = (hello: DeviceSource, plan: Planner) =>
      Effect.gen(function*() {
        planner = plan
        if (admission === undefined) {
          const device = yield* selectDevice(hello.backend, hello.devices)
          admission = yield* makeWith({ device, plan: (path, sizes, sequences) => planner!(path, sizes, sequences) }).pipe(
            Effect.provideService(AdmissionConfig, config)
          )
        }
        const current = admission
        const admitted = yield* Effect.flatMap(current.admitted, Option.match({
          onNone: () => current.admitContexts(roles),
          onSome: Effect.succeed
        }))
        return { current, admitted }
      })

    const hooks: WorkerAdmission["Type"] = {
      admit: (hello, plan) =>
        Effect.gen(function*() {
          const { admitted, current } = yield* admitOnce(hello, plan)
          const contexts: { [R in Role]?: number } = {}
          for (const role of admitted.roles) {
            resident.set(role.role, yield* current.chargeResident(role.role))
            contexts[role.role] = role.contextSize
          }
          yield* Deferred.succeed(ready, current)
          return contexts
        }).pipe(
          // A child that died while planning is retried by the worker; every other failure is final.
          Effect.tapError((e) => (e._tag === "EngineUnavailable" ? Effect.void : Deferred.fail(ready, e)))
        ),
      measured: (role, growth) =>
        Effect.suspend(() => {
          const leases = resident.get(role)
          if (admission === undefined || leases === undefined) return Effect.void
          const measured = admission.device.kind === "cpu" ? growth.rssBytes : growth.vramBytes
          return Effect.flatMap(admission.reconcile(leases.kv, measured - leases.weights.bytes), () =>
            Effect.logInfo("measured memory after load").pipe(
              Effect.annotateLogs({ service: "Admission", role, measuredBytes: measured, chargedBytes: leases.weights.bytes + leases.kv.bytes })
            ))
        })
    }
    return { hooks, admission: Deferred.await(ready) } as const
  })

type DeviceSource = { readonly backend: string; readonly devices: ReadonlyArray<DeviceInfo> }
