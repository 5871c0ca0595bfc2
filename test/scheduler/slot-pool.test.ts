/**
 * Model-based test of the slot pool: random sequences of acquires (random lane, optional
 * conversation), releases (a holder's scope closes) and interrupts of waiters, driven through real
 * fibers. After every step the pool must agree with a model of the rules: which request is served
 * (lane order, FIFO within a lane), which slot it gets (its conversation's own slot, else a free
 * unowned one, else the least recently used owned one, reported as evicted), and its counts.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Runtime from "effect/Runtime"
import * as Scope from "effect/Scope"
import * as TestClock from "effect/TestClock"
import * as fc from "fast-check"
import type { Lane } from "../../src/domain/Inference.js"
import { lanes } from "../../src/internal/LaneQueue.js"
import * as SlotPool from "../../src/services/scheduler/SlotPool.js"

const CONVERSATIONS = ["c0", "c1", "c2", "c3"] as const

type Op =
  | { readonly _tag: "acquire"; readonly lane: Lane; readonly conversation: string | undefined }
  | { readonly _tag: "release"; readonly pick: number }
  | { readonly _tag: "interrupt"; readonly pick: number }
  /** A release, then at once an interrupt of the waiter it serves: the grant and the interrupt race. */
  | { readonly _tag: "releaseRacingInterrupt"; readonly pick: number }

const op: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      _tag: fc.constant("acquire" as const),
      lane: fc.constantFrom(...lanes),
      conversation: fc.option(fc.constantFrom(...CONVERSATIONS), { nil: undefined })
    })
  },
  { weight: 2, arbitrary: fc.record({ _tag: fc.constant("release" as const), pick: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ _tag: fc.constant("interrupt" as const), pick: fc.nat() }) },
  { weight: 2, arbitrary: fc.record({ _tag: fc.constant("releaseRacingInterrupt" as const), pick: fc.nat() }) }
)
const scenario = fc.record({ slots: fc.integer({ min: 1, max: 3 }), ops: fc.array(op, { maxLength: 40, size: "max" }) })

/** An acquire in flight: its fiber ends with the grant; closing its scope releases the slot. */
interface Acquirer {
  readonly id: number
  readonly request: { readonly lane: Lane; readonly conversation: string | undefined }
  readonly scope: Scope.CloseableScope
  readonly fiber: Fiber.RuntimeFiber<SlotPool.Grant>
}
interface Holder extends Acquirer {
  readonly grant: SlotPool.Grant
}

/** The rules, kept independently of the pool: busy slots, ownership with last-use stamps, arrivals. */
class Model {
  readonly busy = new Set<number>()
  readonly owner = new Map<number, { readonly conversation: string; used: number }>()
  readonly waiters: Array<Acquirer> = []
  readonly holders: Array<Holder> = []
  private clock = 0
  constructor(readonly slots: number) {}

  free(): Array<number> {
    return Array.from({ length: this.slots }, (_, i) => i).filter((i) => !this.busy.has(i))
  }

  slotOf(conversation: string): number | undefined {
    for (const [slot, o] of this.owner) if (o.conversation === conversation) return slot
    return undefined
  }

  /** The waiter served next: the first arrival of the highest lane that has one. */
  next(): Acquirer | undefined {
    for (const lane of lanes) {
      const waiter = this.waiters.find((w) => w.request.lane === lane)
      if (waiter !== undefined) return waiter
    }
    return undefined
  }

  /** Checks that `grant` is the slot the rules give `acquirer` now, then records it. */
  grant(acquirer: Acquirer, grant: SlotPool.Grant): void {
    const free = this.free()
    const context = `${JSON.stringify(acquirer.request)} got ${JSON.stringify(grant)}; free ${JSON.stringify(free)}, owners ${
      JSON.stringify([...this.owner])
    }`
    const expected = this.expected(acquirer)
    if (expected !== undefined) {
      assert.deepStrictEqual(grant, expected.grant, `${expected.rule}: ${context}`)
    } else {
      assert.include(free, grant.slot, `granted a busy slot: ${context}`)
      assert.isFalse(this.owner.has(grant.slot), `took an owned slot while an unowned one was free: ${context}`)
      assert.isUndefined(grant.evicted, context)
    }
    this.record(acquirer, grant)
  }

  /**
   * The grant the rules fix for `acquirer` now: its conversation's own free slot, else (with no free
   * unowned slot) the least recently used owned one; undefined when any free unowned slot would do.
   */
  expected(acquirer: Acquirer): { readonly grant: SlotPool.Grant; readonly rule: string } | undefined {
    const { conversation } = acquirer.request
    const free = this.free()
    const own = conversation === undefined ? undefined : this.slotOf(conversation)
    if (own !== undefined && free.includes(own)) return { grant: { slot: own, evicted: undefined }, rule: "own slot not reused" }
    if (free.some((i) => !this.owner.has(i))) return undefined
    const lru = free.reduce((a, b) => (this.owner.get(a)!.used <= this.owner.get(b)!.used ? a : b))
    return { grant: { slot: lru, evicted: this.owner.get(lru)!.conversation }, rule: "least recently used slot not taken over" }
  }

  /** Records a grant (checked, or the only one possible for a waiter interrupted as it was served). */
  record(acquirer: Acquirer, grant: SlotPool.Grant): void {
    const { conversation } = acquirer.request
    const own = conversation === undefined ? undefined : this.slotOf(conversation)
    this.busy.add(grant.slot)
    if (conversation !== undefined) {
      if (own !== undefined) this.owner.delete(own)
      this.owner.set(grant.slot, { conversation, used: ++this.clock })
    } else {
      this.owner.delete(grant.slot)
    }
    const i = this.waiters.indexOf(acquirer)
    if (i >= 0) this.waiters.splice(i, 1)
    this.holders.push({ ...acquirer, grant })
  }

  release(holder: Holder): void {
    this.holders.splice(this.holders.indexOf(holder), 1)
    this.busy.delete(holder.grant.slot)
    const o = this.owner.get(holder.grant.slot)
    if (o !== undefined) o.used = ++this.clock
  }
}

/** Lets other fibers run until `done` holds (or a generous bound passes: the checks that follow then fail). */
const settle = (done: Effect.Effect<boolean>) =>
  Effect.gen(function*() {
    for (let i = 0; i < 200 && !(yield* done); i++) yield* Effect.yieldNow()
  })

const grantOf = (acquirer: Acquirer) =>
  Effect.map(Fiber.poll(acquirer.fiber), (exit) =>
    Option.flatMap(exit, (e) => {
      if (Exit.isSuccess(e)) return Option.some(e.value)
      assert.fail(`acquire #${acquirer.id} ended without a grant: ${String(e.cause)}`)
    }))

/** How the grant-versus-interrupt races ended, across all runs (the interrupt must win some). */
const races = { granted: 0, interrupted: 0 }

const runScenario = (slots: number, ops: ReadonlyArray<Op>) =>
  Effect.gen(function*() {
    const pool = yield* SlotPool.make(slots)
    const model = new Model(slots)
    let ids = 0

    /** The pool agrees with the model; no slot is held twice; nobody waits while a slot is free. */
    const check = Effect.gen(function*() {
      const status = yield* pool.status
      assert.deepStrictEqual(status, {
        busy: model.busy.size,
        waiting: model.waiters.length,
        slots,
        owned: model.owner.size
      })
      const held = model.holders.map((h) => h.grant.slot)
      assert.strictEqual(new Set(held).size, held.length, `a slot is held twice: ${JSON.stringify(held)}`)
      assert.isAtMost(status.busy, slots)
      if (status.waiting > 0) assert.strictEqual(status.busy, slots, "a waiter waits while a slot is free")
      for (const conversation of CONVERSATIONS) {
        assert.strictEqual(pool.slotOf(conversation), model.slotOf(conversation), `slot of ${conversation}`)
      }
      for (const waiter of model.waiters) assert.isTrue(Option.isNone(yield* grantOf(waiter)), `#${waiter.id} granted out of turn`)
    })

    /** The slot just freed goes to the waiter the rules name, if any, and to no one else. */
    const serveNext = Effect.gen(function*() {
      const next = model.next()
      if (next === undefined) return
      yield* settle(Effect.map(grantOf(next), Option.isSome))
      const granted = Option.getOrUndefined(yield* grantOf(next))
      assert.isDefined(granted, `#${next.id} ${JSON.stringify(next.request)} was not served next`)
      model.grant(next, granted!)
    })

    /** Closes a holder's scope. */
    const release = (holder: Holder) =>
      Effect.gen(function*() {
        yield* Scope.close(holder.scope, Exit.void)
        model.release(holder)
        yield* serveNext
      })

    for (const step of ops) {
      switch (step._tag) {
        case "acquire": {
          const request = { lane: step.lane, conversation: step.conversation }
          const scope = yield* Scope.make()
          // A daemon: were a waiter stuck uninterruptibly, a failing run must still end (a child would be awaited).
          const fiber = yield* Effect.forkDaemon(Scope.extend(pool.acquire(request), scope))
          const acquirer: Acquirer = { id: ids++, request, scope, fiber }
          const waitingBefore = model.waiters.length
          yield* settle(
            Effect.zipWith(grantOf(acquirer), pool.status, (g, s) => Option.isSome(g) || s.waiting > waitingBefore)
          )
          const granted = yield* grantOf(acquirer)
          if (model.free().length > 0) {
            assert.isTrue(Option.isSome(granted), `#${acquirer.id} waits while a slot is free`)
            model.grant(acquirer, Option.getOrThrow(granted))
          } else {
            assert.isTrue(Option.isNone(granted), `#${acquirer.id} granted with every slot busy`)
            model.waiters.push(acquirer)
          }
          break
        }
        case "release": {
          const holder = model.holders[step.pick % Math.max(1, model.holders.length)]
          if (holder !== undefined) yield* release(holder)
          break
        }
        case "interrupt": {
          const waiter = model.waiters[step.pick % Math.max(1, model.waiters.length)]
          if (waiter === undefined) break
          model.waiters.splice(model.waiters.indexOf(waiter), 1)
          // Not Fiber.interrupt: a waiter that cannot be interrupted should fail the test, not hang it.
          yield* Fiber.interruptFork(waiter.fiber)
          yield* settle(Effect.map(Fiber.poll(waiter.fiber), Option.isSome))
          const exit = Option.getOrUndefined(yield* Fiber.poll(waiter.fiber))
          assert.isTrue(exit !== undefined && Exit.isInterrupted(exit), `waiter #${waiter.id} not interrupted: ${String(exit)}`)
          yield* Scope.close(waiter.scope, Exit.void)
          break
        }
        case "releaseRacingInterrupt": {
          const holder = model.holders[step.pick % Math.max(1, model.holders.length)]
          if (holder === undefined) break
          yield* Scope.close(holder.scope, Exit.void)
          model.release(holder)
          const next = model.next()
          if (next === undefined) break
          // No yield in between: the waiter is granted the slot and interrupted before it resumes.
          const exit = yield* Fiber.interrupt(next.fiber)
          if (Exit.isSuccess(exit)) {
            races.granted++
            model.grant(next, exit.value)
          } else {
            // It never saw its grant; it must have given the slot back, to be served to the next waiter.
            races.interrupted++
            assert.isTrue(Exit.isInterrupted(exit), `racing waiter #${next.id} ended with ${String(exit)}`)
            const only = model.free()
            assert.strictEqual(only.length, 1)
            model.record(next, model.expected(next)?.grant ?? { slot: only[0]!, evicted: undefined })
          }
          const served = model.holders[model.holders.length - 1]!
          yield* Scope.close(next.scope, Exit.void)
          model.release(served)
          yield* serveNext
          break
        }
      }
      yield* check
    }

    // Drain: every holder releases (serving the waiters left), so every slot comes back exactly once.
    while (model.holders.length > 0) {
      yield* release(model.holders[0]!)
      yield* check
    }
    const status = yield* pool.status
    assert.strictEqual(status.busy, 0)
    assert.strictEqual(status.waiting, 0)
  })

describe("SlotPool (model-based)", () => {
  it.effect("random acquires, releases and interrupts agree with the model after every step", () =>
    Effect.gen(function*() {
      const runtime = yield* Effect.runtime<never>()
      yield* Effect.promise(() =>
        fc.assert(
          fc.asyncProperty(scenario, ({ ops, slots }) => Runtime.runPromise(runtime)(runScenario(slots, ops))),
          { numRuns: 500 }
        )
      )
      assert.isAbove(races.interrupted, 0, "no race ended with the interrupt first")
    }))

  it.scoped("a queued acquire can time out (the scheduler's queue timeout) and leaves nothing behind", () =>
    Effect.gen(function*() {
      const pool = yield* SlotPool.make(1)
      yield* pool.acquire({ lane: "utility" })
      const waiter = yield* Effect.fork(Effect.scoped(Effect.timeout(pool.acquire({ lane: "decision" }), "1 second")))
      yield* settle(Effect.map(pool.status, (s) => s.waiting === 1))
      assert.deepStrictEqual(yield* pool.status, { busy: 1, waiting: 1, slots: 1, owned: 0 })
      yield* TestClock.adjust("1 second")
      yield* settle(Effect.map(Fiber.poll(waiter), Option.isSome))
      const exit = Option.getOrUndefined(yield* Fiber.poll(waiter))
      assert.isTrue(
        exit !== undefined && Exit.isFailure(exit) && Cause.isTimeoutException(Cause.squash(exit.cause)),
        `the queued acquire did not time out: ${String(exit)}`
      )
      assert.deepStrictEqual(yield* pool.status, { busy: 1, waiting: 0, slots: 1, owned: 0 })
    }))
})
