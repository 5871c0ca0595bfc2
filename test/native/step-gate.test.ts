/**
 * The engine's step gate: at each boundary the highest lane waiting runs its next step, first come
 * first served within a lane; a step interrupted at any point of its run, waiting or holding the
 * gate, leaves the gate free for the next. Batchable steps queued at the head start together as one
 * step, and are one boundary for the lanes above them.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import type { Lane } from "../../src/native/Protocol.js"
import * as StepGate from "../../src/native/StepGate.js"
import { forkInterruptedAt, isDone, settle } from "../support/interruptions.js"

/** Whether the gate is free: a step submitted now runs without anyone else finishing first. */
const isFree = (gate: StepGate.StepGate) =>
  Effect.gen(function*() {
    const probe = yield* Effect.forkDaemon(gate.run("preparation", Effect.void))
    yield* settle(isDone(probe))
    const free = yield* isDone(probe)
    yield* Fiber.interrupt(probe)
    return free
  })

/** Lets other fibers and event-loop turns run until `done` holds (the gate waits one turn after a batch). */
const settleTurns = (done: Effect.Effect<boolean>) =>
  Effect.gen(function*() {
    for (let i = 0; i < 50 && !(yield* done); i++) {
      yield* Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve)))
      yield* settle(done)
    }
  })

describe("StepGate", () => {
  it.effect("serves the highest lane waiting at each boundary, first come first served within a lane", () =>
    Effect.gen(function*() {
      const gate = yield* StepGate.make
      const ran: Array<string> = []
      const holding = yield* Deferred.make<void>()
      const holder = yield* Effect.fork(gate.run("foreground", Deferred.await(holding)))
      yield* Effect.yieldNow()
      const steps: ReadonlyArray<readonly [Lane, string]> = [
        ["utility", "u1"],
        ["foreground", "f1"],
        ["preparation", "p1"],
        ["decision", "d1"],
        ["foreground", "f2"],
        ["decision", "d2"],
        ["utility", "u2"]
      ]
      const fibers: Array<Fiber.RuntimeFiber<void>> = []
      for (const [lane, name] of steps) {
        fibers.push(yield* Effect.fork(gate.run(lane, Effect.sync(() => void ran.push(name)))))
        // Each arrival is queued before the next one comes.
        yield* Effect.yieldNow()
      }
      assert.deepStrictEqual(ran, [], "a step ran while the gate was held")
      yield* Deferred.succeed(holding, undefined)
      yield* Fiber.join(holder)
      for (const fiber of fibers) yield* Fiber.join(fiber)
      assert.deepStrictEqual(ran, ["d1", "d2", "f1", "f2", "u1", "u2", "p1"])
    }))

  it.effect("a step interrupted at any point of its run, waiting or holding the gate, leaves it free", () =>
    Effect.gen(function*() {
      for (const contended of [false, true]) {
        for (let n = 1; ; n++) {
          const gate = yield* StepGate.make
          const holding = yield* Deferred.make<void>()
          const holder = contended ? yield* Effect.fork(gate.run("foreground", Deferred.await(holding))) : undefined
          if (holder !== undefined) yield* Effect.yieldNow()
          const { fiber, reached } = yield* forkInterruptedAt(gate.run("decision", Effect.void), n)
          yield* Effect.yieldNow()
          yield* Deferred.succeed(holding, undefined)
          if (holder !== undefined) yield* Fiber.join(holder)
          yield* settle(isDone(fiber))
          assert.isTrue(yield* isDone(fiber), `${contended ? "waiting" : "free"}: the step interrupted at operation ${n} never ended`)
          const exit = yield* Fiber.await(fiber)
          assert.isTrue(Exit.isSuccess(exit) || Exit.isInterrupted(exit), String(exit))
          assert.isTrue(yield* isFree(gate), `${contended ? "waiting" : "free"}: the gate is held after an interruption at operation ${n}`)
          if (!reached()) break
        }
      }
    }))

  it.effect("batchable steps at the head of the queue start together; a decision queued meanwhile runs before the next batch", () =>
    Effect.gen(function*() {
      const gate = yield* StepGate.make
      const events: Array<string> = []
      const finish = new Map<string, () => void>()
      /** A batchable step that records its start and settles when the test says so. */
      const batchable = (name: string) =>
        gate.batch("foreground", () => {
          events.push(name)
          return new Promise<void>((resolve) => finish.set(name, resolve))
        })
      const holding = yield* Deferred.make<void>()
      const holder = yield* Effect.fork(gate.run("foreground", Deferred.await(holding)))
      yield* Effect.yieldNow()
      const fibers: Array<Fiber.RuntimeFiber<unknown, unknown>> = []
      for (const step of [batchable("b1"), batchable("b2"), gate.run("foreground", Effect.sync(() => void events.push("x"))), batchable("b3")]) {
        fibers.push(yield* Effect.fork(step))
        yield* Effect.yieldNow()
      }
      yield* Deferred.succeed(holding, undefined)
      yield* Fiber.join(holder)
      yield* settleTurns(Effect.sync(() => events.length === 2))
      // b1 and b2 run together; x (not batchable) waits for the boundary, and b3 behind it.
      assert.deepStrictEqual(events, ["b1", "b2"])
      fibers.push(yield* Effect.fork(gate.run("decision", Effect.sync(() => void events.push("d")))))
      yield* Effect.yieldNow()
      finish.get("b1")!()
      yield* settleTurns(Effect.sync(() => events.length > 2))
      assert.deepStrictEqual(events, ["b1", "b2"], "a step started before the whole batch settled")
      finish.get("b2")!()
      yield* settleTurns(Effect.sync(() => events.length === 5))
      assert.deepStrictEqual(events, ["b1", "b2", "d", "x", "b3"])
      finish.get("b3")!()
      for (const fiber of fibers) yield* Fiber.join(fiber)
    }))

  it.effect("a batchable step interrupted while waiting never starts; one interrupted after it started waits for it", () =>
    Effect.gen(function*() {
      const gate = yield* StepGate.make
      const started: Array<string> = []
      let settleRunning: () => void = () => {}
      const holding = yield* Deferred.make<void>()
      const holder = yield* Effect.fork(gate.run("foreground", Deferred.await(holding)))
      yield* Effect.yieldNow()
      const waiting = yield* Effect.fork(gate.batch("foreground", async () => void started.push("waiting")))
      yield* Effect.yieldNow()
      yield* Fiber.interrupt(waiting)
      yield* Deferred.succeed(holding, undefined)
      yield* Fiber.join(holder)
      const running = yield* Effect.fork(gate.batch("foreground", () => {
        started.push("running")
        return new Promise<void>((resolve) => (settleRunning = resolve))
      }))
      yield* settleTurns(Effect.sync(() => started.length > 0))
      assert.deepStrictEqual(started, ["running"])
      const interrupting = yield* Effect.fork(Fiber.interrupt(running))
      yield* settleTurns(isDone(interrupting))
      assert.isFalse(yield* isDone(interrupting), "the interruption did not wait for the started step")
      settleRunning()
      yield* Fiber.join(interrupting)
      yield* settleTurns(isFree(gate))
      assert.isTrue(yield* isFree(gate))
    }))
})
