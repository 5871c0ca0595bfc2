/**
 * Supervision of the engine child: the current incarnation is one scoped resource, served until it
 * is reported broken, then retired and acquired again under `Effect.retry` with the restart budget
 * as its Schedule. Beyond the budget the worker is `failed` and tries again after the backoff; a
 * refusal (admission, a model the engine will not load) is `failed` until `repair()`. The episode
 * (acquire, serve, restart) runs in a FiberHandle in the worker's scope: whoever reported a failure
 * or asked for a repair only waits, so a repair always runs to its end (`ready` or `failed`). The
 * idle heartbeat is a repeat on a spaced schedule forked into the worker's scope.
 */
import type { RpcClientError } from "@effect/rpc/RpcClientError"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as ExecutionStrategy from "effect/ExecutionStrategy"
import * as FiberHandle from "effect/FiberHandle"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Schedule from "effect/Schedule"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as SubscriptionRef from "effect/SubscriptionRef"
import { EngineUnavailable } from "../../domain/EngineError.js"
import { ChildFailed, guarded, isRestartable, type TaggedFailure } from "./ChildFaults.js"
import * as Incarnation from "./Incarnation.js"
import { NativeWorkerConfig } from "./NativeWorkerConfig.js"
import type { EngineState } from "../../domain/Inference.js"
import * as Readiness from "./Readiness.js"
import * as RestartBudget from "./RestartBudget.js"
import type { ChildResources, WorkerAdmission } from "./WorkerHooks.js"

interface Status {
  readonly state: EngineState
  readonly reason: string | undefined
  readonly current: Incarnation.Incarnation | undefined
}

/** The status once `incarnation` is taken out of service for `failure` (unchanged if it no longer serves). */
const outOfService = (incarnation: Incarnation.Incarnation, failure: ChildFailed) => (s: Status): Status =>
  s.current === incarnation ? { state: "repairing", reason: failure.reason, current: undefined } : s

export interface Supervisor {
  /** The ready incarnation, waiting (bounded) while the engine starts or repairs. */
  readonly ready: Effect.Effect<Incarnation.Incarnation, EngineUnavailable>
  /** Runs a call on the ready child; a child failure is reported (repair) and surfaces as ChildFailed. */
  readonly onReady: <A, E extends TaggedFailure>(
    call: (incarnation: Incarnation.Incarnation) => Effect.Effect<A, E | RpcClientError>,
    deadline?: Duration.Duration | undefined
  ) => Effect.Effect<A, Exclude<E, { readonly _tag: "RpcClientError" }> | ChildFailed | EngineUnavailable>
  /** Reports a failure of an incarnation: the first report takes it out of service and repairs it. */
  readonly onFailure: (incarnation: Incarnation.Incarnation, failure: ChildFailed) => Effect.Effect<void>
  /** Whether an incarnation is still the one serving (not replaced, not being repaired). */
  readonly isCurrent: (incarnation: Incarnation.Incarnation) => Effect.Effect<boolean>
  readonly readiness: Effect.Effect<Readiness.WorkerReadiness>
  readonly states: Stream.Stream<EngineState>
  /** A failed worker tries again at once; any other is left alone. Waits for the outcome. */
  readonly repair: Effect.Effect<void>
}

/** Starts the first child and waits until it is ready or the worker has failed. */
export const make: Effect.Effect<
  Supervisor,
  never,
  NativeWorkerConfig | WorkerAdmission | ChildResources | Scope.Scope
> = Effect.gen(function*() {
  const config = yield* NativeWorkerConfig
  const acquire = yield* Incarnation.makeAcquire
  const workerScope = yield* Effect.scope
  // Every incarnation's scope is forked from this one, made now: a replacement child is then
  // stopped where the worker was built, after the services built on it (their finalizers use it).
  const childrenScope = yield* Scope.fork(workerScope, ExecutionStrategy.sequential)
  const status = yield* SubscriptionRef.make<Status>({ state: "starting", reason: undefined, current: undefined })
  const log = yield* Readiness.makeRecoveryLog(config.recoveryActions ?? [], config.recoveryLogLength)
  const loadFailure = yield* Ref.make<Readiness.WorkerReadiness["loadFailure"]>(undefined)
  const incarnations = yield* Ref.make(0)
  /** The failure the next start replaces: its outcome is logged when that start ends. */
  const lastFailure = yield* Ref.make<ChildFailed | undefined>(undefined)
  /** A failure to feed the budget before the next start: the repair request that began an episode. */
  const pending = yield* Ref.make<ChildFailed | undefined>(undefined)
  const episodes = yield* FiberHandle.make<void, never>()
  const startedAt = yield* Clock.currentTimeMillis
  const budget = { intensity: config.restartIntensity, period: config.restartPeriod }

  const setState = (state: EngineState, reason?: string) =>
    SubscriptionRef.update(status, (s) => ({ ...s, state, reason }))

  const onFailure = (incarnation: Incarnation.Incarnation, failure: ChildFailed) =>
    Effect.zipRight(
      // Taken out of service at once: a caller that retries after this returns waits for the
      // replacement instead of finding the broken child still `ready`.
      SubscriptionRef.update(status, outOfService(incarnation, failure)),
      Deferred.succeed(incarnation.broken, failure)
    )

  /** Acquires a child, serves with it until it is reported broken, retires it, and fails with why. */
  const serveOne: Effect.Effect<never, ChildFailed> = Effect.gen(function*() {
    const last = yield* Ref.get(lastFailure)
    if (last !== undefined) yield* setState("repairing", last.reason)
    const number = yield* Ref.updateAndGet(incarnations, (n) => n + 1)
    const scope = yield* Scope.fork(childrenScope, ExecutionStrategy.sequential)
    const failure = yield* Effect.gen(function*() {
      // A repair's stages keep the reason: the failure they repair.
      const incarnation = yield* acquire(number, (stage) => setState(stage, last?.reason)).pipe(
        Effect.tapError((failed) =>
          Effect.zipRight(
            last === undefined ? Effect.void : log.append({ kind: last.kind, reason: last.reason, outcome: "failed" }),
            Ref.set(lastFailure, failed)
          )
        )
      )
      yield* Ref.set(loadFailure, undefined)
      yield* SubscriptionRef.set(status, { state: "ready", reason: undefined, current: incarnation })
      if (last !== undefined) yield* log.append({ kind: last.kind, reason: last.reason, outcome: "replaced" })
      const failure = yield* Deferred.await(incarnation.broken)
      yield* SubscriptionRef.update(status, outOfService(incarnation, failure))
      yield* Effect.logWarning(`engine child ${incarnation.child.pid} failed (${failure.kind}): ${failure.reason}`)
      // A broken child goes straight to SIGTERM/SIGKILL and its exit is observed before its scope
      // (client, leases) closes: nothing it held is released while it may still run.
      yield* incarnation.child.terminate
      yield* Ref.set(lastFailure, failure)
      return failure
    }).pipe(Scope.use(scope))
    return yield* Effect.fail(failure)
  })

  const attempt = Effect.flatMap(
    Ref.getAndSet(pending, undefined),
    (request) => request === undefined ? serveOne : Effect.zipRight(Ref.set(lastFailure, request), Effect.fail(request))
  )

  /** Past the budget or refused: `failed` with the reason, then the backoff (a refusal waits for repair()). */
  const giveUp = (last: ChildFailed, window: RestartBudget.FailureWindow): Effect.Effect<void> =>
    Effect.gen(function*() {
      if (RestartBudget.isExhausted(window, budget)) {
        const reason = `restart budget exhausted (${window.length} failures within ${
          Duration.format(config.restartPeriod)
        }); last: ${last.reason}`
        yield* Effect.uninterruptible(Effect.zipRight(
          log.append({ kind: "budget", reason, outcome: "gave-up" }),
          SubscriptionRef.set(status, { state: "failed", reason, current: undefined })
        ))
        yield* Effect.logError(reason)
        yield* Effect.sleep(config.restartBackoff)
        return yield* episode("backoff expired")
      }
      yield* Effect.uninterruptible(Effect.all([
        last.role === undefined ? Effect.void : Ref.set(loadFailure, { role: last.role, reason: last.reason }),
        log.append({ kind: last.kind, reason: last.reason, outcome: "gave-up" }),
        SubscriptionRef.set(status, { state: "failed", reason: last.reason, current: undefined })
      ]))
      yield* Effect.logError(last.reason)
      return yield* Effect.never
    })

  /** Serving and restarting until the budget runs out; `repairRequest` starts it as a repair. */
  const episode = (repairRequest?: string): Effect.Effect<void> =>
    Effect.gen(function*() {
      if (repairRequest !== undefined) {
        yield* log.append({ kind: "repair-request", reason: repairRequest, outcome: "pending" })
        yield* Ref.set(pending, new ChildFailed({ kind: "repair-request", reason: repairRequest }))
      }
      return yield* Effect.retryOrElse(
        attempt,
        RestartBudget.schedule(budget).pipe(Schedule.whileInput(isRestartable)),
        giveUp
      )
    })

  const settled = status.changes.pipe(
    Stream.filter((s) => s.state === "ready" || s.state === "failed" || s.state === "stopped"),
    Stream.runHead
  )

  /** Waits for the engine to settle: ready (its incarnation) or given up (EngineUnavailable), bounded. */
  const waitReady: Effect.Effect<Incarnation.Incarnation, EngineUnavailable> = settled.pipe(
    Effect.flatMap((s) =>
      Option.isSome(s) && s.value.state === "ready" && s.value.current !== undefined
        ? Effect.succeed(s.value.current)
        : Effect.fail(new EngineUnavailable({ reason: Option.match(s, { onNone: () => "stopped", onSome: (v) => v.reason ?? v.state }) }))
    ),
    Effect.timeoutTo({
      duration: config.readyTimeout,
      onSuccess: Effect.succeed,
      onTimeout: () =>
        Effect.flatMap(SubscriptionRef.get(status), (s) =>
          Effect.fail(
            new EngineUnavailable({
              reason: `no ready engine within ${Duration.format(config.readyTimeout)} (${s.state}${s.reason === undefined ? "" : `: ${s.reason}`})`
            })
          ))
    }),
    Effect.flatten
  )

  // A ready engine is read from the status at once (per request: no subscription to its changes).
  const ready: Effect.Effect<Incarnation.Incarnation, EngineUnavailable> = Effect.flatMap(
    SubscriptionRef.get(status),
    (s) => s.state === "ready" && s.current !== undefined ? Effect.succeed(s.current) : waitReady
  )

  const onReady: Supervisor["onReady"] = (call, deadline = config.stepDeadline) =>
    Effect.flatMap(ready, (incarnation) =>
      guarded(incarnation.child, call(incarnation), deadline).pipe(
        Effect.tapError((e) => (e instanceof ChildFailed ? onFailure(incarnation, e) : Effect.void))
      ))

  const repair = Effect.zipRight(
    // Only a failed worker begins a repair; the check and the start cannot be separated.
    Effect.uninterruptible(
      Effect.flatMap(
        SubscriptionRef.modify(status, (s): [boolean, Status] =>
          s.state === "failed" ? [true, { ...s, state: "repairing" }] : [false, s]),
        (begin) => begin ? FiberHandle.run(episodes, episode("explicit repair request")) : Effect.void
      )
    ),
    settled
  )

  const readiness = Effect.gen(function*() {
    const s = yield* SubscriptionRef.get(status)
    const now = yield* Clock.currentTimeMillis
    return Readiness.view(config.models, {
      state: s.state,
      reason: s.reason,
      current: s.current === undefined ? undefined : { ...s.current, pid: s.current.child.pid },
      incarnations: yield* Ref.get(incarnations),
      uptimeMillis: now - startedAt,
      recoveryActions: yield* log.entries,
      loadFailure: yield* Ref.get(loadFailure)
    })
  })

  // Stopping: requests fail at once with EngineUnavailable, then the episode (and its child) ends.
  yield* Effect.addFinalizer(() => SubscriptionRef.update(status, (s) => ({ ...s, state: "stopped" as const, current: undefined })))
  // The first start counts against the budget like any other.
  yield* FiberHandle.run(episodes, episode())
  yield* settled

  // Idle heartbeat: a child that stops answering while nobody calls it is found all the same.
  const heartbeat = Effect.gen(function*() {
    const s = yield* SubscriptionRef.get(status)
    if (s.state !== "ready" || s.current === undefined) return
    const current = s.current
    yield* guarded(current.child, current.child.client.Hello(), config.stepDeadline).pipe(
      Effect.catchTag("ChildFailed", (failure) => onFailure(current, failure))
    )
  })
  yield* Effect.forkIn(Effect.repeat(heartbeat, Schedule.spaced(config.heartbeatInterval)), workerScope)

  return {
    ready,
    onReady,
    onFailure,
    isCurrent: (incarnation) => Effect.map(SubscriptionRef.get(status), (s) => s.current === incarnation),
    readiness,
    states: Stream.changes(Stream.map(status.changes, (s) => s.state)),
    repair
  }
})
