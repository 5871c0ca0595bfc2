/**
 * The admission ledger: random sequences of workspace acquisitions, resident charges, releases
 * and interruptions across lanes and sizes, run against a reference model of the head-of-line
 * rule, plus the invariants checked on their own: the charge never exceeds the budget, every
 * lease is released exactly once, no waiter is passed by one behind it (lane, then FIFO), and the
 * head of the queue never waits while it fits.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as fc from "effect/FastCheck"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import type * as Admission from "../../src/services/Admission.js"
import { lanes as LANES } from "../../src/internal/LaneQueue.js"
import type { Lane } from "../../src/native/Protocol.js"
import type { InsufficientDeviceMemory, InvalidCharge, WorkspaceTooLarge } from "../../src/services/AdmissionError.js"
import { makeLedger } from "./support.js"

type Op =
  | { readonly _tag: "Workspace"; readonly lane: Lane; readonly bytes: number }
  | { readonly _tag: "Resident"; readonly kind: "weights" | "kv"; readonly bytes: number }
  | { readonly _tag: "Release"; readonly pick: number }
  | { readonly _tag: "Interrupt"; readonly pick: number }

const laneArb = fc.constantFrom<Lane>(...LANES)

const opArb = (budget: number): fc.Arbitrary<Op> =>
  fc.oneof(
    { weight: 5, arbitrary: fc.record({ _tag: fc.constant("Workspace" as const), lane: laneArb, bytes: fc.integer({ min: 0, max: budget + 5 }) }) },
    { weight: 1, arbitrary: fc.record({ _tag: fc.constant("Resident" as const), kind: fc.constantFrom("weights" as const, "kv" as const), bytes: fc.integer({ min: 0, max: Math.ceil(budget / 2) }) }) },
    { weight: 3, arbitrary: fc.record({ _tag: fc.constant("Release" as const), pick: fc.nat() }) },
    { weight: 2, arbitrary: fc.record({ _tag: fc.constant("Interrupt" as const), pick: fc.nat() }) }
  )

const scenarioArb = fc.integer({ min: 1, max: 40 }).chain((budget) =>
  fc.record({ budget: fc.constant(budget), ops: fc.array(opArb(budget), { minLength: 1, maxLength: 40 }) })
)

/** The reference model of the ledger: the rule written the simplest way. */
class Model {
  readonly leases = new Map<string, { readonly kind: string; readonly bytes: number }>()
  /** Waiters in arrival order. */
  queue: Array<{ readonly label: string; readonly lane: Lane; readonly bytes: number }> = []
  readonly failed = new Set<string>()
  constructor(readonly budget: number) {}
  get charged() {
    let sum = 0
    for (const l of this.leases.values()) sum += l.bytes
    return sum
  }
  get ceiling() {
    let resident = 0
    for (const l of this.leases.values()) if (l.kind !== "workspace") resident += l.bytes
    return Math.max(0, this.budget - resident)
  }
  ordered() {
    return LANES.flatMap((lane) => this.queue.filter((w) => w.lane === lane))
  }
  dispatch() {
    const ceiling = this.ceiling
    for (const w of this.queue) if (w.bytes > ceiling) this.failed.add(w.label)
    this.queue = this.queue.filter((w) => w.bytes <= ceiling)
    for (const w of this.ordered()) {
      if (this.charged + w.bytes > this.budget) break
      this.leases.set(w.label, { kind: "workspace", bytes: w.bytes })
      this.queue = this.queue.filter((q) => q !== w)
    }
  }
  workspace(label: string, lane: Lane, bytes: number) {
    if (bytes > this.ceiling) return this.failed.add(label)
    const rank = LANES.indexOf(lane)
    const ahead = this.queue.some((w) => LANES.indexOf(w.lane) <= rank)
    if (!ahead && this.charged + bytes <= this.budget) this.leases.set(label, { kind: "workspace", bytes })
    else this.queue.push({ label, lane, bytes })
  }
  resident(label: string, kind: string, bytes: number) {
    if (this.charged + bytes > this.budget) return this.failed.add(label)
    this.leases.set(label, { kind, bytes })
    this.dispatch()
  }
  end(label: string) {
    this.leases.delete(label)
    this.queue = this.queue.filter((w) => w.label !== label)
    this.dispatch()
  }
}

type AcquireError = WorkspaceTooLarge | InsufficientDeviceMemory | InvalidCharge

interface Holder {
  readonly label: string
  readonly fiber: Fiber.RuntimeFiber<void, AcquireError>
  readonly release: Deferred.Deferred<void>
  readonly granted: Deferred.Deferred<Admission.Lease>
  ended: boolean
}

/** Holds a lease until told to release it, then closes its scope. */
const hold = (acquire: Effect.Effect<Admission.Lease, AcquireError, Scope.Scope>, label: string) =>
  Effect.gen(function*() {
    const release = yield* Deferred.make<void>()
    const granted = yield* Deferred.make<Admission.Lease>()
    const fiber = yield* Effect.fork(
      Effect.scoped(
        Effect.gen(function*() {
          const lease = yield* acquire
          yield* Deferred.succeed(granted, lease)
          yield* Deferred.await(release)
        })
      )
    )
    const holder: Holder = { label, fiber, release, granted, ended: false }
    return holder
  })

/** Waits until the ledger has seen a new request: it holds a lease, waits, or its fiber ended. */
const entered = (admission: Admission.Admission["Type"], holder: Holder) =>
  Effect.gen(function*() {
    for (let i = 0; i < 1000; i++) {
      const s = yield* admission.status
      if (s.leases.some((l) => l.label === holder.label) || s.waiting.some((w) => w.label === holder.label)) return
      if (Option.isSome(yield* Fiber.poll(holder.fiber))) return
      yield* Effect.yieldNow()
    }
    assert.fail(`request ${holder.label} never reached the ledger`)
  })

const checkAgainst = (
  model: Model,
  before: ReadonlyArray<string>,
  s: Admission.AdmissionStatus,
  step: string
) => {
  // Invariants of their own.
  assert.isAtMost(s.chargedBytes, s.budgetBytes, `${step}: charged within budget`)
  assert.strictEqual(s.chargedBytes, s.leases.reduce((a, l) => a + l.bytes, 0), `${step}: charged = sum of leases`)
  const rank = (lane: Lane) => LANES.indexOf(lane)
  for (let i = 1; i < s.waiting.length; i++) {
    const a = s.waiting[i - 1]!, b = s.waiting[i]!
    assert.isTrue(rank(a.lane) < rank(b.lane) || (a.lane === b.lane && a.id < b.id), `${step}: waiting order`)
  }
  const head = s.waiting[0]
  if (head !== undefined) {
    assert.isAbove(s.chargedBytes + head.bytes, s.budgetBytes, `${step}: the head waits only when it does not fit`)
  }
  // Grants from the queue form a prefix of the order before the step: nobody was passed.
  const stillWaiting = new Set(s.waiting.map((w) => w.label))
  const live = new Set(s.leases.map((l) => l.label))
  const grantedNow = before.filter((label) => live.has(label))
  for (const g of grantedNow) {
    for (const w of before) {
      if (w === g) break
      assert.isFalse(stillWaiting.has(w), `${step}: ${g} was served before ${w}, which was ahead of it`)
    }
  }
  // Against the model.
  assert.deepStrictEqual(
    s.leases.map((l) => [l.label, l.bytes]).sort(),
    [...model.leases.entries()].map(([label, l]) => [label, l.bytes]).sort(),
    `${step}: leases`
  )
  assert.deepStrictEqual(s.waiting.map((w) => w.label), model.ordered().map((w) => w.label), `${step}: queue`)
}

describe("Admission leases", () => {
  it.effect.prop(
    "random acquire/release/interrupt sequences follow the head-of-line rule and release every lease once",
    [scenarioArb],
    ([{ budget, ops }]) =>
      Effect.gen(function*() {
        const admission = yield* makeLedger(budget)
        const model = new Model(budget)
        const holders: Array<Holder> = []
        let n = 0
        for (const op of ops) {
          const step = `#${n} ${JSON.stringify(op)}`
          const before = (yield* admission.status).waiting.map((w) => w.label)
          switch (op._tag) {
            case "Workspace":
            case "Resident": {
              const label = `r${n}`
              const holder = yield* hold(
                op._tag === "Workspace"
                  ? admission.workspace({ lane: op.lane, bytes: op.bytes, label })
                  : admission.charge(op.kind, label, op.bytes),
                label
              )
              holders.push(holder)
              yield* entered(admission, holder)
              if (op._tag === "Workspace") model.workspace(label, op.lane, op.bytes)
              else model.resident(label, op.kind, op.bytes)
              break
            }
            case "Release":
            case "Interrupt": {
              const alive = holders.filter((h) => !h.ended)
              if (alive.length === 0) break
              const h = alive[op.pick % alive.length]!
              h.ended = true
              if (op._tag === "Release") {
                // Only a granted holder can release; a waiting one is interrupted instead.
                if (Option.isSome(yield* Deferred.poll(h.granted))) {
                  yield* Deferred.succeed(h.release, undefined)
                  yield* Fiber.await(h.fiber)
                } else yield* Fiber.interrupt(h.fiber)
              } else yield* Fiber.interrupt(h.fiber)
              model.end(h.label)
              break
            }
          }
          checkAgainst(model, before, yield* admission.status, step)
          // Requests the model refused (at once, or because they can no longer ever fit) fail with
          // a typed error and never held anything. The ledger already dropped them (the queue
          // matched the model), so their fibers complete.
          for (const h of holders) {
            if (h.ended || !model.failed.has(h.label)) continue
            h.ended = true
            const exit = yield* Fiber.await(h.fiber)
            const error = Exit.isFailure(exit) ? Cause.failureOption(exit.cause) : Option.none()
            assert.isTrue(Option.isSome(error), `${step}: ${h.label} failed`)
            if (Option.isSome(error)) {
              assert.include(["WorkspaceTooLarge", "InsufficientDeviceMemory"], error.value._tag, h.label)
            }
            assert.isTrue(Option.isNone(yield* Deferred.poll(h.granted)), `${h.label} never granted`)
          }
          n++
        }
        for (const h of holders) yield* Fiber.interrupt(h.fiber)
        const end = yield* admission.status
        assert.strictEqual(end.chargedBytes, 0)
        assert.deepStrictEqual(end.leases, [])
        assert.deepStrictEqual(end.waiting, [])
      }),
    { fastCheck: { numRuns: 200 } }
  )
})
