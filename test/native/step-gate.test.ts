/**
 * The engine's step gate: at each boundary the highest lane waiting runs its next step, first come
 * first served within a lane; a step interrupted at any point of its run, waiting or holding the
 * gate, leaves the gate free for the next.
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
})
