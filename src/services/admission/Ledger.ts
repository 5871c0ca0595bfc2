/**
 * The device ledger: every charge on one device budget as a scoped lease (weights, kv,
 * workspace), released exactly once when its scope closes, interruption included. Weights and KV
 * never wait: they fit now or fail. Workspace requests that do not fit wait in one lane-ordered
 * queue (decision, foreground, utility, preparation; then arrival) with a strict head of line; a
 * request that could never fit (more than the budget minus the resident charges) fails at once.
 * `reconcile` charges the difference when the child measures more than was charged.
 */
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import type { DeviceInfo, Lane } from "../../native/Protocol.js"
import * as LaneQueue from "../../internal/LaneQueue.js"
import { InsufficientDeviceMemory, InvalidCharge, type LeaseKind, WorkspaceTooLarge } from "../AdmissionError.js"
import type { AdmissionConfigShape } from "./AdmissionConfig.js"
import type { DeviceKind } from "./ContextPlanner.js"

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

export interface LedgerStatus {
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
}

export interface WorkspaceRequest {
  readonly lane: Lane
  readonly bytes: number
  /** What the workspace is for (a request id); shown in status and errors. Default "workspace". */
  readonly label?: string | undefined
}

export interface Ledger {
  readonly device: DeviceBudget
  readonly charge: (
    kind: "weights" | "kv",
    label: string,
    bytes: number
  ) => Effect.Effect<Lease, InsufficientDeviceMemory | InvalidCharge, Scope.Scope>
  readonly workspace: (request: WorkspaceRequest) => Effect.Effect<Lease, WorkspaceTooLarge | InvalidCharge, Scope.Scope>
  readonly reconcile: (lease: Lease, measuredBytes: number) => Effect.Effect<number>
  readonly status: Effect.Effect<LedgerStatus>
}

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

/** A ledger over one device budget. */
export const make = (device: DeviceBudget): Effect.Effect<Ledger> =>
  Effect.gen(function*() {
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

    const status = Effect.sync((): LedgerStatus => {
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
        waiting
      }
    })

    return { device, charge, workspace, reconcile, status }
  })
