/**
 * The lane queue, model-based (fc.commands): waiters of random lanes and sizes arrive, holders
 * release, waiters are interrupted (also in the instant they are served), the owner resizes its
 * capacity; real fibers run against a model of the rule. After every command: a waiter is served
 * only when its capacity is free, the highest lane first and first come first served within a lane
 * (strictly from the head), an interrupted waiter holds nothing, a request that can never be
 * served is refused, and nobody waits while the head fits (no lost wake-up). Then every point of
 * an acquire, waiting or not, is interrupted in turn: nothing is ever left held.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Data from "effect/Data"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as fc from "effect/FastCheck"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Runtime from "effect/Runtime"
import * as Scope from "effect/Scope"
import type { Lane } from "../../src/domain/Inference.js"
import * as LaneQueue from "../../src/internal/LaneQueue.js"
import { forkInterruptedAt, isDone, settle } from "../support/interruptions.js"

class Refused extends Data.TaggedError("Refused")<{ readonly id: number; readonly units: number; readonly limit: number }> {}

interface Request {
  readonly id: number
  readonly units: number
}

/** A capacity of `limit` units that the owner may resize; a request of more units than the limit is refused (when refusing). */
class Units {
  used = 0
  readonly held = new Set<number>()
  constructor(public limit: number, readonly refusing: boolean) {}
  readonly capacity: LaneQueue.Capacity<Request, Request, Refused> = {
    take: (r) => {
      if (this.used + r.units > this.limit) return undefined
      this.used += r.units
      this.held.add(r.id)
      return r
    },
    give: (r) => {
      assert.isTrue(this.held.delete(r.id), `request #${r.id} given back twice, or never taken`)
      this.used -= r.units
    },
    refuse: (r) => (this.refusing && r.units > this.limit ? new Refused({ id: r.id, units: r.units, limit: this.limit }) : undefined)
  }
}

/** How a request holds its grant: a scope it extends, or `withGrant` around a wait for its release. */
type Style = "scoped" | "withGrant"

interface Acquirer {
  readonly id: number
  readonly lane: Lane
  readonly units: number
  readonly style: Style
  readonly fiber: Fiber.RuntimeFiber<Request, Refused>
  readonly scope: Scope.CloseableScope
  readonly release: Deferred.Deferred<void>
  /** What `withGrant`'s body saw once it held the grant. */
  readonly seen: { value: Request | undefined }
}

interface Real {
  readonly units: Units
  readonly queue: LaneQueue.LaneQueue<Request, Request, Refused>
  readonly all: Array<Acquirer>
}

interface ModelWaiter {
  readonly id: number
  readonly lane: Lane
  readonly units: number
}

/** The rule, kept independently of the queue: who holds, who waits (arrival order), who was refused. */
class Model {
  readonly holders = new Map<number, number>()
  waiters: Array<ModelWaiter> = []
  readonly refused = new Set<number>()
  races = { interruptFirst: 0, grantFirst: 0 }
  ids = 0
  constructor(public limit: number, readonly refusing: boolean) {}

  get used() {
    let sum = 0
    for (const units of this.holders.values()) sum += units
    return sum
  }

  /** Waiters in the order they are served: lane, then arrival. */
  order(): Array<ModelWaiter> {
    return LaneQueue.lanes.flatMap((lane) => this.waiters.filter((w) => w.lane === lane))
  }

  /** Refuses the waiters that can never fit, then serves from the head while it fits; returns those served. */
  dispatch(): Array<ModelWaiter> {
    if (this.refusing) {
      for (const w of this.waiters) if (w.units > this.limit) this.refused.add(w.id)
      this.waiters = this.waiters.filter((w) => !this.refused.has(w.id))
    }
    const served: Array<ModelWaiter> = []
    for (const w of this.order()) {
      if (this.used + w.units > this.limit) break
      this.holders.set(w.id, w.units)
      served.push(w)
    }
    this.waiters = this.waiters.filter((w) => !served.includes(w))
    return served
  }

  arrive(w: ModelWaiter): "served" | "waiting" | "refused" {
    if (this.refusing && w.units > this.limit) {
      this.refused.add(w.id)
      return "refused"
    }
    const rank = LaneQueue.lanes.indexOf(w.lane)
    const ahead = this.waiters.some((q) => LaneQueue.lanes.indexOf(q.lane) <= rank)
    if (!ahead && this.used + w.units <= this.limit) {
      this.holders.set(w.id, w.units)
      return "served"
    }
    this.waiters.push(w)
    return "waiting"
  }

  release(id: number): Array<ModelWaiter> {
    this.holders.delete(id)
    return this.dispatch()
  }
}

/** The grant an acquirer has observed: its fiber's result (scoped) or what its body saw (withGrant). */
const grantOf = (a: Acquirer): Effect.Effect<Request | undefined> =>
  a.style === "withGrant"
    ? Effect.succeed(a.seen.value)
    : Effect.map(Fiber.poll(a.fiber), (exit) =>
      Option.isSome(exit) && Exit.isSuccess(exit.value) ? exit.value.value : undefined)

const byId = (r: Real, id: number) => r.all.find((a) => a.id === id)!

/** Every holder the model names has observed its own grant; every refused request has failed. */
const caughtUp = (m: Model, r: Real) =>
  Effect.gen(function*() {
    for (const id of m.holders.keys()) if ((yield* grantOf(byId(r, id))) === undefined) return false
    for (const id of m.refused) if (!(yield* isDone(byId(r, id).fiber))) return false
    return true
  })

/** The queue and its capacity agree with the model. */
const check = (m: Model, r: Real) =>
  Effect.gen(function*() {
    yield* settle(caughtUp(m, r))
    const held = [...r.units.held].sort((a, b) => a - b)
    assert.deepStrictEqual(held, [...m.holders.keys()].sort((a, b) => a - b), "who holds capacity")
    assert.strictEqual(r.units.used, m.used)
    assert.deepStrictEqual(r.queue.waiting().map((w) => w.id), m.order().map((w) => w.id), "the waiters, in serving order")
    assert.strictEqual(r.queue.size, m.waiters.length)
    const head = r.queue.waiting()[0]
    if (head !== undefined) {
      assert.isAbove(r.units.used + head.units, r.units.limit, `the head #${head.id} waits although it fits (a lost wake-up)`)
    }
    for (const id of m.holders.keys()) {
      const grant = yield* grantOf(byId(r, id))
      assert.strictEqual(grant?.id, id, `holder #${id} has not seen its grant`)
    }
    for (const w of m.waiters) {
      const a = byId(r, w.id)
      assert.isUndefined(yield* grantOf(a), `#${w.id} served out of turn`)
      assert.isFalse(yield* isDone(a.fiber), `waiter #${w.id} ended`)
    }
    for (const id of m.refused) {
      const exit = yield* Fiber.await(byId(r, id).fiber)
      const error = Exit.isFailure(exit) ? Option.getOrUndefined(Cause.failureOption(exit.cause)) : undefined
      assert.strictEqual(error?.id, id, `#${id} was not refused: ${String(exit)}`)
    }
  })

const run = (runtime: Runtime.Runtime<never>) => <A>(effect: Effect.Effect<A>) => Runtime.runPromise(runtime)(effect)

const laneArb = fc.constantFrom(...LaneQueue.lanes)

type Cmd = fc.AsyncCommand<Model, Real>

const commands = (runtime: Runtime.Runtime<never>) => {
  const go = run(runtime)

  /** Releases a holder: closes its scope, or lets its `withGrant` body end. */
  const releaseHolder = (m: Model, a: Acquirer) =>
    Effect.gen(function*() {
      if (a.style === "scoped") yield* Scope.close(a.scope, Exit.void)
      else {
        yield* Deferred.succeed(a.release, undefined)
        const exit = yield* Fiber.await(a.fiber)
        assert.isTrue(Exit.isSuccess(exit), `holder #${a.id} ended with ${String(exit)}`)
      }
      m.release(a.id)
    })

  class Acquire implements Cmd {
    constructor(readonly lane: Lane, readonly units: number, readonly style: Style) {}
    check = () => true
    run = (m: Model, r: Real) =>
      go(Effect.gen(this, function*() {
        const { lane, style, units } = this
        const id = m.ids++
        const request: Request = { id, units }
        const scope = yield* Scope.make()
        const release = yield* Deferred.make<void>()
        const seen: { value: Request | undefined } = { value: undefined }
        const effect: Effect.Effect<Request, Refused> = style === "scoped"
          ? Scope.extend(r.queue.acquire(lane, request), scope)
          : r.queue.withGrant(lane, request, (grant) =>
            Effect.sync(() => void (seen.value = grant)).pipe(Effect.zipRight(Deferred.await(release)), Effect.as(grant)))
        const waitingBefore = r.queue.size
        // A daemon: were a waiter stuck uninterruptibly, a failing run must still end.
        const fiber = yield* Effect.forkDaemon(effect)
        const a: Acquirer = { id, lane, units, style, fiber, scope, release, seen }
        r.all.push(a)
        m.arrive({ id, lane, units })
        yield* settle(
          Effect.map(
            Effect.all([grantOf(a), isDone(fiber)]),
            ([grant, done]) => grant !== undefined || done || r.queue.size > waitingBefore
          )
        )
        yield* check(m, r)
      }))
    toString = () => `acquire(${this.lane}, ${this.units}, ${this.style})`
  }

  class Release implements Cmd {
    constructor(readonly pick: number) {}
    check = (m: Model) => m.holders.size > 0
    run = (m: Model, r: Real) =>
      go(Effect.gen(this, function*() {
        const ids = [...m.holders.keys()]
        yield* releaseHolder(m, byId(r, ids[this.pick % ids.length]!))
        yield* check(m, r)
      }))
    toString = () => `release(${this.pick})`
  }

  class Interrupt implements Cmd {
    constructor(readonly pick: number) {}
    check = (m: Model) => m.waiters.length > 0
    run = (m: Model, r: Real) =>
      go(Effect.gen(this, function*() {
        const w = m.waiters[this.pick % m.waiters.length]!
        const a = byId(r, w.id)
        m.waiters = m.waiters.filter((q) => q !== w)
        // Not Fiber.interrupt: a waiter that cannot be interrupted should fail the test, not hang it.
        yield* Fiber.interruptFork(a.fiber)
        yield* settle(isDone(a.fiber))
        const exit = Option.getOrUndefined(yield* Fiber.poll(a.fiber))
        assert.isTrue(exit !== undefined && Exit.isInterrupted(exit), `waiter #${w.id} not interrupted: ${String(exit)}`)
        assert.isFalse(r.units.held.has(w.id), `interrupted waiter #${w.id} holds capacity`)
        // Whoever was behind it may fit now (it may have been the head).
        m.dispatch()
        yield* check(m, r)
      }))
    toString = () => `interrupt(${this.pick})`
  }

  /** A scoped holder releases, and the first waiter it serves is interrupted at once: the grant and the interrupt race. */
  class ReleaseRacingInterrupt implements Cmd {
    constructor(readonly pick: number) {}
    check = (m: Model) => m.holders.size > 0
    run = (m: Model, r: Real) =>
      go(Effect.gen(this, function*() {
        const scoped = r.all.filter((a) => m.holders.has(a.id) && a.style === "scoped")
        const holder = scoped[this.pick % Math.max(1, scoped.length)]
        if (holder === undefined) return
        yield* Scope.close(holder.scope, Exit.void)
        const served = m.release(holder.id)
        const next = served[0]
        if (next !== undefined) {
          const a = byId(r, next.id)
          // No yield in between: the waiter is served and interrupted before it resumes.
          const exit = yield* Fiber.interrupt(a.fiber)
          if (Exit.isInterrupted(exit) && (yield* grantOf(a)) === undefined) m.races.interruptFirst++
          else m.races.grantFirst++
          // Either way it ends holding nothing once its scope is closed.
          yield* Scope.close(a.scope, Exit.void)
          assert.isFalse(r.units.held.has(next.id), `interrupted waiter #${next.id} holds capacity`)
          m.release(next.id)
        }
        yield* check(m, r)
      }))
    toString = () => `releaseRacingInterrupt(${this.pick})`
  }

  /** The owner changes its capacity by other means and dispatches. */
  class Resize implements Cmd {
    constructor(readonly limit: number) {}
    check = () => true
    run = (m: Model, r: Real) =>
      go(Effect.gen(this, function*() {
        yield* Effect.sync(() => {
          r.units.limit = this.limit
          r.queue.unsafeDispatch()
        })
        m.limit = this.limit
        m.dispatch()
        yield* check(m, r)
      }))
    toString = () => `resize(${this.limit})`
  }

  return {
    arbitrary: fc.commands(
      [
        fc.oneof(
          {
            weight: 5,
            arbitrary: fc.tuple(laneArb, fc.integer({ min: 1, max: 3 }), fc.constantFrom<Style>("scoped", "withGrant")).map(
              ([lane, units, style]): Cmd => new Acquire(lane, units, style)
            )
          },
          { weight: 2, arbitrary: fc.nat().map((pick): Cmd => new Release(pick)) },
          { weight: 1, arbitrary: fc.nat().map((pick): Cmd => new Interrupt(pick)) },
          { weight: 2, arbitrary: fc.nat().map((pick): Cmd => new ReleaseRacingInterrupt(pick)) },
          { weight: 1, arbitrary: fc.integer({ min: 0, max: 5 }).map((limit): Cmd => new Resize(limit)) }
        )
      ],
      { maxCommands: 40, size: "max" }
    ),
    /** Every holder releases and the capacity grows to fit anyone: everyone is served and everything comes back. */
    drain: (m: Model, r: Real) =>
      go(Effect.gen(function*() {
        yield* Effect.sync(() => {
          r.units.limit = 3
          r.queue.unsafeDispatch()
        })
        m.limit = 3
        m.dispatch()
        yield* check(m, r)
        while (m.holders.size > 0) {
          yield* releaseHolder(m, byId(r, m.holders.keys().next().value!))
          yield* check(m, r)
        }
        assert.strictEqual(r.units.used, 0)
        assert.strictEqual(r.queue.size, 0)
        assert.strictEqual(r.units.held.size, 0)
      }))
  }
}

describe("LaneQueue (model-based)", () => {
  it.effect("waiters in random lanes, releases, interrupts and resizes agree with the model after every command", () =>
    Effect.gen(function*() {
      const runtime = yield* Effect.runtime<never>()
      const { arbitrary, drain } = commands(runtime)
      const races = { interruptFirst: 0, grantFirst: 0 }
      yield* Effect.promise(() =>
        fc.assert(
          fc.asyncProperty(fc.integer({ min: 1, max: 4 }), fc.boolean(), arbitrary, async (limit, refusing, cmds) => {
            const units = new Units(limit, refusing)
            const model = new Model(limit, refusing)
            const real: Real = { units, queue: LaneQueue.make(units.capacity), all: [] }
            await fc.asyncModelRun(() => ({ model, real }), cmds)
            await drain(model, real)
            races.interruptFirst += model.races.interruptFirst
            races.grantFirst += model.races.grantFirst
          }),
          { numRuns: 300 }
        )
      )
      assert.isAbove(races.interruptFirst, 0, "no race ended with the interrupt first")
    }))
})

describe("LaneQueue (every interruption point)", () => {
  for (const style of ["scoped", "withGrant"] as const) {
    it.effect(`an acquire (${style}) interrupted at any point, free or waiting, leaves nothing held`, () =>
      Effect.gen(function*() {
        for (const contended of [false, true]) {
          for (let n = 1; ; n++) {
            const units = new Units(1, false)
            const queue = LaneQueue.make(units.capacity)
            const holding = yield* Deferred.make<void>()
            const holder = contended
              ? yield* Effect.fork(queue.withGrant("foreground", { id: 0, units: 1 }, () => Deferred.await(holding)))
              : undefined
            if (holder !== undefined) yield* Effect.yieldNow()
            const effect = style === "scoped"
              ? Effect.scoped(Effect.zipRight(queue.acquire("decision", { id: 1, units: 1 }), Effect.yieldNow()))
              : queue.withGrant("decision", { id: 1, units: 1 }, () => Effect.yieldNow())
            const { fiber, reached } = yield* forkInterruptedAt(effect, n)
            yield* Effect.yieldNow()
            yield* Deferred.succeed(holding, undefined)
            if (holder !== undefined) yield* Fiber.join(holder)
            yield* settle(isDone(fiber))
            const where = `${contended ? "waiting" : "free"}, interrupted at operation ${n}`
            assert.isTrue(yield* isDone(fiber), `${where}: never ended`)
            const exit = yield* Fiber.await(fiber)
            assert.isTrue(Exit.isSuccess(exit) || Exit.isInterrupted(exit), `${where}: ended with ${String(exit)}`)
            assert.deepStrictEqual([units.used, queue.size, [...units.held]], [0, 0, []], `${where}: left held`)
            if (!reached()) break
          }
        }
      }))
  }
})
