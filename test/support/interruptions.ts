/**
 * Interruption at a chosen point: `interruptAt(effect, n)` runs `effect` in a fiber that is
 * interrupted just before the `n`-th operation it runs, so a sweep over `n` interrupts it at every
 * point of its run (a real interruption, delivered the way any other fiber would deliver it).
 */
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as FiberId from "effect/FiberId"
import * as Option from "effect/Option"
import * as Scheduler from "effect/Scheduler"

/** Lets other fibers run until `done` holds (or a generous bound passes: the checks that follow then fail). */
export const settle = (done: Effect.Effect<boolean>) =>
  Effect.gen(function*() {
    for (let i = 0; i < 200 && !(yield* done); i++) yield* Effect.yieldNow()
  })

export const isDone = <A, E>(fiber: Fiber.Fiber<A, E>) => Effect.map(Fiber.poll(fiber), Option.isSome)

/**
 * Forks `effect` (a daemon, so that a fiber stuck uninterruptibly fails a test instead of hanging
 * it) to be interrupted before its `n`-th operation. `reached` tells whether it got that far.
 */
export const forkInterruptedAt = <A, E>(effect: Effect.Effect<A, E>, n: number) =>
  Effect.gen(function*() {
    let ops = 0
    const scheduler = Scheduler.make(
      (task, priority) => Scheduler.defaultScheduler.scheduleTask(task, priority),
      (fiber) => {
        if (++ops === n) fiber.unsafeInterruptAsFork(FiberId.none)
        return false
      }
    )
    const fiber = yield* Effect.forkDaemon(Effect.withScheduler(effect, scheduler))
    return { fiber, reached: () => ops >= n }
  })
