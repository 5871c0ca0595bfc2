/**
 * The admission ledger by example: how the budget is set, the typed refusals and their facts,
 * lane order and the head-of-line rule, interruption of waiters (also when the grant races the
 * interruption), and reconcile.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Logger from "effect/Logger"
import * as Option from "effect/Option"
import * as Scope from "effect/Scope"
import { DeviceInfo } from "../../src/native/Protocol.js"
import * as Admission from "../../src/services/Admission.js"
import type { Lane } from "../../src/native/Protocol.js"
import { fakeDevice, makeLedger } from "./support.js"

const MiB = 1024 * 1024

/** Forks a fiber that takes a workspace lease and holds it until `release` completes. */
const holdWorkspace = (admission: Admission.Admission["Type"], lane: Lane, bytes: number, label: string) =>
  Effect.gen(function*() {
    const release = yield* Deferred.make<void>()
    const fiber = yield* Effect.fork(
      Effect.scoped(Effect.zipRight(admission.workspace({ lane, bytes, label }), Deferred.await(release)))
    )
    return { fiber, release, label }
  })

/** Lets forked fibers reach the ledger: waits until `label` holds a lease or waits. */
const settled = (admission: Admission.Admission["Type"], label: string) =>
  Effect.gen(function*() {
    for (let i = 0; i < 1000; i++) {
      const s = yield* admission.status
      if (s.leases.some((l) => l.label === label) || s.waiting.some((w) => w.label === label)) return s
      yield* Effect.yieldNow()
    }
    return assert.fail(`${label} never reached the ledger`)
  })

const labels = (s: Admission.AdmissionStatus) => ({
  leases: s.leases.map((l) => l.label),
  waiting: s.waiting.map((w) => w.label)
})

describe("Admission budget", () => {
  it("is free memory minus headroom, or the explicit cap", () => {
    const device = new DeviceInfo({ name: "gpu0", kind: "gpu", totalBytes: 80_000 * MiB, freeBytes: 70_000 * MiB })
    const config = { ...Admission.AdmissionConfig.defaults, headroomBytes: 1_000 * MiB }
    assert.deepStrictEqual(Admission.deviceBudget(device, config), {
      name: "gpu0",
      kind: "gpu",
      totalBytes: 80_000 * MiB,
      freeBytes: 70_000 * MiB,
      budgetBytes: 69_000 * MiB,
      source: "inventory"
    })
    assert.strictEqual(Admission.deviceBudget(device, { ...config, capBytes: 8_192 * MiB }).budgetBytes, 8_192 * MiB)
    assert.strictEqual(Admission.deviceBudget(device, { ...config, capBytes: 8_192 * MiB }).source, "cap")
    const small = new DeviceInfo({ name: "cpu", kind: "cpu", totalBytes: 100, freeBytes: 100 })
    assert.strictEqual(Admission.deviceBudget(small, config).budgetBytes, 0)
  })

  it.effect("uses the device of the backend's kind, or fails naming the devices", () =>
    Effect.gen(function*() {
      const cpu = fakeDevice(100, "cpu"), gpu = fakeDevice(100, "gpu")
      assert.strictEqual(yield* Admission.selectDevice("cuda", [cpu, gpu]), gpu)
      assert.strictEqual(yield* Admission.selectDevice("cpu", [gpu, cpu]), cpu)
      const error = yield* Effect.flip(Admission.selectDevice("vulkan", [cpu]))
      assert.strictEqual(error._tag, "DeviceNotFound")
      assert.deepStrictEqual(error.devices, ["fake-cpu (cpu)"])
    }))

  it.effect("reports total, budget, charged, free and leases by kind", () =>
    Effect.gen(function*() {
      const admission = yield* makeLedger(1000)
      yield* admission.charge("weights", "w", 300)
      yield* admission.charge("kv", "kv", 200)
      yield* admission.workspace({ lane: "utility", bytes: 100, label: "u" })
      const s = yield* admission.status
      assert.strictEqual(s.budgetBytes, 1000)
      assert.strictEqual(s.totalBytes, 8000)
      assert.strictEqual(s.chargedBytes, 600)
      assert.strictEqual(s.freeBytes, 400)
      assert.deepStrictEqual(s.byKind, {
        weights: { count: 1, bytes: 300 },
        kv: { count: 1, bytes: 200 },
        workspace: { count: 1, bytes: 100 }
      })
      assert.deepStrictEqual(s.leases.map((l) => [l.kind, l.label, l.lane, l.bytes]), [
        ["weights", "w", undefined, 300],
        ["kv", "kv", undefined, 200],
        ["workspace", "u", "utility", 100]
      ])
    }).pipe(Effect.scoped))
})

describe("Admission refusals", () => {
  it.scoped("a workspace larger than the budget less resident charges fails at once, with the bytes", () =>
    Effect.gen(function*() {
      const admission = yield* makeLedger(1000)
      const over = yield* Effect.flip(admission.workspace({ lane: "decision", bytes: 1001, label: "probe" }))
      assert.strictEqual(over._tag, "WorkspaceTooLarge")
      if (over._tag !== "WorkspaceTooLarge") return
      assert.deepStrictEqual(
        [over.lane, over.label, over.requestedBytes, over.availableBytes, over.budgetBytes],
        ["decision", "probe", 1001, 1000, 1000]
      )
      yield* admission.charge("weights", "w", 700)
      const resident = yield* Effect.flip(admission.workspace({ lane: "foreground", bytes: 301 }))
      assert.strictEqual(resident._tag, "WorkspaceTooLarge")
      if (resident._tag === "WorkspaceTooLarge") assert.strictEqual(resident.availableBytes, 300)
      assert.match(resident.message, /301 bytes .* at most 300 bytes/)
      assert.deepStrictEqual((yield* admission.status).waiting, [])
    }))

  it.scoped("a weights or KV charge that does not fit now fails with the bytes asked and free", () =>
    Effect.gen(function*() {
      const admission = yield* makeLedger(1000)
      yield* admission.charge("weights", "generation weights", 600)
      const error = yield* Effect.flip(admission.charge("kv", "generation context", 401))
      assert.strictEqual(error._tag, "InsufficientDeviceMemory")
      if (error._tag !== "InsufficientDeviceMemory") return
      assert.deepStrictEqual([error.kind, error.requestedBytes, error.freeBytes, error.budgetBytes], ["kv", 401, 400, 1000])
      assert.strictEqual((yield* admission.status).chargedBytes, 600)
    }))

  it.scoped("negative or fractional bytes are refused", () =>
    Effect.gen(function*() {
      const admission = yield* makeLedger(1000)
      assert.strictEqual((yield* Effect.flip(admission.workspace({ lane: "utility", bytes: -1 })))._tag, "InvalidCharge")
      assert.strictEqual((yield* Effect.flip(admission.charge("kv", "x", 1.5)))._tag, "InvalidCharge")
    }))
})

describe("Admission waiting", () => {
  it.scoped("waiters are served by lane, FIFO within a lane", () =>
    Effect.gen(function*() {
      const admission = yield* makeLedger(100)
      const blocker = yield* holdWorkspace(admission, "preparation", 100, "blocker")
      yield* settled(admission, "blocker")
      const order: Array<[Lane, string]> = [
        ["foreground", "f1"],
        ["utility", "u1"],
        ["preparation", "p1"],
        ["decision", "d1"],
        ["foreground", "f2"],
        ["decision", "d2"]
      ]
      const held = new Map<string, { readonly release: Deferred.Deferred<void>; readonly fiber: Fiber.RuntimeFiber<void, unknown> }>()
      held.set("blocker", blocker)
      for (const [lane, label] of order) {
        held.set(label, yield* holdWorkspace(admission, lane, 100, label))
        yield* settled(admission, label)
      }
      assert.deepStrictEqual(labels(yield* admission.status).waiting, ["d1", "d2", "f1", "f2", "u1", "p1"])
      // Each lease takes the whole budget: releasing one grants exactly the next, synchronously.
      const served: Array<string> = []
      let current = "blocker"
      for (let i = 0; i < order.length; i++) {
        const h = held.get(current)!
        yield* Deferred.succeed(h.release, undefined)
        yield* Fiber.await(h.fiber)
        const s = yield* admission.status
        assert.strictEqual(s.leases.length, 1)
        current = s.leases[0]!.label
        served.push(current)
      }
      assert.deepStrictEqual(served, ["d1", "d2", "f1", "f2", "u1", "p1"])
    }))

  it.scoped("a blocked higher-lane head holds back smaller requests behind it, until it leaves", () =>
    Effect.gen(function*() {
      const admission = yield* makeLedger(100)
      yield* holdWorkspace(admission, "utility", 60, "running")
      yield* settled(admission, "running")
      const big = yield* holdWorkspace(admission, "decision", 80, "decision-80")
      yield* settled(admission, "decision-80")
      // 30 bytes are free and this fits, but it would take memory the decision head waits for.
      yield* holdWorkspace(admission, "foreground", 30, "foreground-30")
      yield* holdWorkspace(admission, "preparation", 10, "preparation-10")
      yield* settled(admission, "foreground-30")
      yield* settled(admission, "preparation-10")
      assert.deepStrictEqual(labels(yield* admission.status), {
        leases: ["running"],
        waiting: ["decision-80", "foreground-30", "preparation-10"]
      })
      // Even an empty request of the same lane queues behind the head: FIFO within the lane.
      yield* holdWorkspace(admission, "decision", 0, "decision-0")
      yield* settled(admission, "decision-0")
      assert.deepStrictEqual(labels(yield* admission.status).waiting, [
        "decision-80",
        "decision-0",
        "foreground-30",
        "preparation-10"
      ])
      // The head gives up: those behind it are served in order at once.
      yield* Fiber.interrupt(big.fiber)
      assert.deepStrictEqual(labels(yield* admission.status), {
        leases: ["running", "decision-0", "foreground-30", "preparation-10"],
        waiting: []
      })
    }))

  it.scoped("a request with no waiter at or above its lane is served at once when it fits", () =>
    Effect.gen(function*() {
      const admission = yield* makeLedger(100)
      yield* holdWorkspace(admission, "foreground", 60, "running")
      yield* settled(admission, "running")
      yield* holdWorkspace(admission, "preparation", 50, "preparation-50")
      yield* settled(admission, "preparation-50")
      yield* holdWorkspace(admission, "utility", 30, "utility-30")
      yield* settled(admission, "utility-30")
      assert.deepStrictEqual(labels(yield* admission.status), {
        leases: ["running", "utility-30"],
        waiting: ["preparation-50"]
      })
    }))

  it.scoped("an interrupted waiter leaves nothing behind", () =>
    Effect.gen(function*() {
      const admission = yield* makeLedger(100)
      const running = yield* holdWorkspace(admission, "foreground", 100, "running")
      yield* settled(admission, "running")
      const waiting = yield* holdWorkspace(admission, "decision", 50, "waiting")
      yield* settled(admission, "waiting")
      const exit = yield* Fiber.interrupt(waiting.fiber)
      assert.isTrue(Exit.isInterrupted(exit))
      assert.deepStrictEqual(labels(yield* admission.status), { leases: ["running"], waiting: [] })
      yield* Deferred.succeed(running.release, undefined)
      yield* Fiber.await(running.fiber)
      const s = yield* admission.status
      assert.strictEqual(s.chargedBytes, 0)
      assert.deepStrictEqual(labels(s), { leases: [], waiting: [] })
    }))

  it.effect("a waiter granted and interrupted at the same moment releases exactly once", () =>
    Effect.gen(function*() {
      for (const yields of [0, 1, 2, 3, 5, 8]) {
        const admission = yield* makeLedger(100)
        const scope = yield* Scope.make()
        yield* admission.charge("kv", "resident", 40).pipe(Scope.extend(scope))
        yield* admission.workspace({ lane: "foreground", bytes: 60, label: "running" }).pipe(Scope.extend(scope))
        const waiter = yield* holdWorkspace(admission, "decision", 60, "waiter")
        yield* settled(admission, "waiter")
        const other = yield* holdWorkspace(admission, "utility", 40, "other")
        yield* settled(admission, "other")
        // Closing the scope grants the waiter synchronously, before its fiber resumes; the
        // interruption then lands 0..8 scheduler turns later.
        yield* Scope.close(scope, Exit.void)
        for (let i = 0; i < yields; i++) yield* Effect.yieldNow()
        yield* Fiber.interrupt(waiter.fiber)
        // The waiter's lease is gone exactly once: only `other` (served after it) may hold memory.
        const s = yield* settled(admission, "other")
        assert.strictEqual(s.chargedBytes, s.leases.reduce((a, l) => a + l.bytes, 0), `yields ${yields}`)
        assert.deepStrictEqual(labels(s), { leases: ["other"], waiting: [] }, `yields ${yields}`)
        yield* Deferred.succeed(waiter.release, undefined)
        yield* Fiber.interrupt(other.fiber)
        assert.strictEqual((yield* admission.status).chargedBytes, 0, `yields ${yields}`)
      }
    }))

  it.scoped("a waiter that can no longer ever fit fails instead of waiting forever", () =>
    Effect.gen(function*() {
      const admission = yield* makeLedger(100)
      yield* holdWorkspace(admission, "foreground", 50, "running")
      yield* settled(admission, "running")
      const waiter = yield* holdWorkspace(admission, "decision", 80, "waiter")
      yield* settled(admission, "waiter")
      yield* admission.charge("weights", "late model", 30)
      const exit = yield* Fiber.await(waiter.fiber)
      assert.isTrue(Exit.isFailure(exit) && !Exit.isInterrupted(exit))
      if (Exit.isFailure(exit)) assert.match(String(exit.cause), /WorkspaceTooLarge/)
      assert.deepStrictEqual((yield* admission.status).waiting, [])
    }))
})

describe("Admission reconcile", () => {
  it.effect("charges and logs what the measurement adds, releases it with the lease", () =>
    Effect.gen(function*() {
      const logs: Array<string> = []
      const capture = Logger.replace(
        Logger.defaultLogger,
        Logger.make(({ annotations, logLevel, message }) => {
          logs.push(`${logLevel.label} ${String(message)} ${JSON.stringify(Object.fromEntries(annotations))}`)
        })
      )
      const admission = yield* makeLedger(1000)
      const scope = yield* Scope.make()
      const weights = yield* admission.charge("weights", "generation weights", 400).pipe(Scope.extend(scope))
      assert.strictEqual(yield* admission.reconcile(weights, 350), 0)
      assert.strictEqual(yield* admission.reconcile(weights, 400), 0)
      assert.deepStrictEqual(logs, [])
      assert.strictEqual(yield* admission.reconcile(weights, 450).pipe(Effect.provide(capture)), 50)
      assert.strictEqual(logs.length, 1)
      assert.match(logs[0]!, /WARN measured memory exceeds the charge/)
      assert.match(logs[0]!, /"addedBytes":50/)
      let s = yield* admission.status
      assert.deepStrictEqual([s.chargedBytes, s.leases[0]!.bytes, s.byKind.weights.bytes], [450, 450, 450])
      // The resident charge grew, so less is ever available to workspace.
      const error = yield* Effect.flip(Effect.scoped(admission.workspace({ lane: "decision", bytes: 551 })))
      assert.strictEqual(error._tag, "WorkspaceTooLarge")
      yield* Scope.close(scope, Exit.void)
      s = yield* admission.status
      assert.strictEqual(s.chargedBytes, 0)
      assert.strictEqual(yield* admission.reconcile(weights, 10_000), 0, "a released lease is not charged again")
      assert.strictEqual((yield* admission.status).chargedBytes, 0)
    }))
})

describe("Admission token budgets", () => {
  it.effect("before context admission, roles are not admitted", () =>
    Effect.gen(function*() {
      const admission = yield* makeLedger(1000)
      assert.deepStrictEqual(yield* admission.admitted, Option.none())
      assert.strictEqual((yield* Effect.flip(admission.contextOf("generation")))._tag, "RoleNotAdmitted")
      assert.strictEqual((yield* Effect.flip(admission.checkTokens("decision", 1, 1)))._tag, "RoleNotAdmitted")
    }))
})
