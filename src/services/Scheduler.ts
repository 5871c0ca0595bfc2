/**
 * Scheduler: who gets the engine, and when. Engine work is cut into steps (prefill chunks, decode
 * steps, one decision score) that the engine child's step gate runs one at a time in lane order
 * (decision, foreground, utility, preparation), so a decision request runs at the next step
 * boundary of a running generation. On the host, the Scheduler admits each request before its
 * first step: a generation waits (in lane order, FIFO within a lane) for a sequence of the
 * generation context (conversations keep theirs; see scheduler/SlotPool.ts; a request without a
 * conversation also borrows a conversation slot no conversation owns), then for a ready
 * engine, then for its workspace charge through Admission; a decision waits for the engine and
 * its workspace. All of it is bounded: a queue length (QueueFull at once) and a queue timeout
 * (QueueTimeout); nothing is dropped silently. The queue timeout counts from the request's
 * submission: what the Provider does before queueing (rendering and tokenizing the prompt, which
 * wait for a ready engine too) runs under the same deadline (`beforeQueue`). Everything is held
 * for the caller's scope, so interrupting the caller frees the slot and the workspace lease.
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import { EngineUnavailable } from "../domain/EngineError.js"
import type { Lane } from "../domain/Inference.js"
import { lanes } from "../internal/LaneQueue.js"
import { Admission } from "./Admission.js"
import type { WorkspaceTooLarge } from "./AdmissionError.js"
import { NativeWorker, type WorkerReadiness } from "./NativeWorker.js"
import { QueueFull, QueueTimeout } from "./ProviderError.js"
import { SchedulerConfig, type SchedulerConfigShape } from "./scheduler/SchedulerConfig.js"
import * as SlotPool from "./scheduler/SlotPool.js"

export { SchedulerConfig, type SchedulerConfigShape } from "./scheduler/SchedulerConfig.js"

export interface GenerationTicket {
  readonly lane: Exclude<Lane, "decision">
  /** Request id, shown in status and errors. */
  readonly label: string
  readonly conversation?: string | undefined
  /** When the request was submitted (clock milliseconds): its queue timeout counts from then. Default: now. */
  readonly submittedAt?: number | undefined
}

/** Who waits: a lane, or a call that is not queued but waits for the engine all the same. */
export type Waiter = Lane | "count" | "tokenize"

export interface GenerationGrant {
  readonly slot: number
  /** A conversation whose slot this request took over. */
  readonly evicted: string | undefined
  readonly queuedMillis: number
}

export interface SchedulerStatus {
  /** Requests admitted and not finished. */
  readonly running: number
  /** Requests waiting for a slot, the engine or workspace. */
  readonly queued: number
  readonly slots: number
  /** Conversations that own a slot. */
  readonly conversations: number
  /** Conversation slots no request holds now. */
  readonly idleConversationSlots: number
  /** Running and queued requests per lane, from the highest priority to the lowest. */
  readonly lanes: ReadonlyArray<{ readonly lane: Lane; readonly running: number; readonly queued: number }>
}

export type AdmitError = QueueFull | QueueTimeout | WorkspaceTooLarge | EngineUnavailable

export class Scheduler extends Context.Tag("nativegen/Scheduler")<Scheduler, {
  /** Admits a generation: slot, ready engine, workspace; all held until the scope closes. */
  readonly generation: (ticket: GenerationTicket) => Effect.Effect<GenerationGrant, AdmitError, Scope.Scope>
  /**
   * Admits a decision request of `heads` heads: ready engine and workspace, held for the scope.
   * `submittedAt` as for a generation.
   */
  readonly decision: (
    label: string,
    heads: number,
    submittedAt?: number
  ) => Effect.Effect<{ readonly queuedMillis: number }, AdmitError, Scope.Scope>
  /**
   * Runs what a request does before it is queued (rendering and tokenizing its prompt: calls that
   * wait for a ready engine) within its queue timeout counted from `submittedAt`; past it, fails
   * with QueueTimeout naming what it waited for and the engine's state. What is left of the
   * timeout is the queue's, when the same `submittedAt` is given to `generation` or `decision`.
   */
  readonly beforeQueue: <A, E, R>(
    waiter: Waiter,
    submittedAt: number,
    work: Effect.Effect<A, E, R>
  ) => Effect.Effect<A, E | QueueTimeout, R>
  /** The slot a conversation owns now. */
  readonly slotOf: (conversation: string) => number | undefined
  readonly status: Effect.Effect<SchedulerStatus>
}>() {}

/** The stage of a queued request that waits for a ready engine. */
const engineWait = "a ready engine"

/** Sequences the generation context needs: conversation slots, then anonymous ones. */
export const sequencesOf = (config: SchedulerConfigShape) => config.slots + config.anonymousSlots

export const make = Effect.gen(function*() {
  const config = yield* SchedulerConfig
  const worker = yield* NativeWorker
  const admission = yield* Admission
  for (const [name, value] of Object.entries({
    slots: config.slots,
    anonymousSlots: config.anonymousSlots,
    maxQueued: config.maxQueued,
    generationWorkspaceBytes: config.generationWorkspaceBytes,
    decisionWorkspaceBytesPerHead: config.decisionWorkspaceBytesPerHead
  })) {
    if (!Number.isSafeInteger(value) || value <= 0) return yield* Effect.dieMessage(`invalid scheduler ${name} ${value}: must be a positive integer`)
  }
  const slots = yield* SlotPool.make(config.slots)
  // Anonymous sequences come after the conversation slots in the generation context.
  const anonymous = yield* SlotPool.make(config.anonymousSlots)
  /** Requests queued and running per lane (index in `lanes` order). */
  const queuedIn = lanes.map(() => 0)
  const runningIn = lanes.map(() => 0)
  const total = (counts: ReadonlyArray<number>) => counts.reduce((a, b) => a + b, 0)

  /** Waits for a ready engine; a worker that has given up fails at once with its reason. */
  const waitEngineReady = worker.states.pipe(
    Stream.filter((s) => s === "ready" || s === "failed" || s === "stopped"),
    Stream.runHead,
    Effect.flatMap((state) =>
      Option.contains(state, "ready")
        ? Effect.void
        : Effect.flatMap(worker.readiness, (r) => Effect.fail(new EngineUnavailable({ reason: r.reason ?? r.state })))
    )
  )
  // A ready engine is read at once (per request: no subscription to the worker's state changes).
  const engineReady = Effect.flatMap(worker.readiness, (r) => (r.state === "ready" ? Effect.void : waitEngineReady))

  const queueTimeoutMillis = Duration.toMillis(config.queueTimeout)

  /** The engine's state and why, as a QueueTimeout's reason says it. */
  const stateOf = (r: WorkerReadiness) => (r.reason === undefined ? r.state : `${r.state}: ${r.reason}`)

  /**
   * Runs `work` until the request's deadline (the queue timeout after `submittedAt`); past it,
   * QueueTimeout with the reason `describe` gives then.
   */
  const untilDeadline = <A, E, R>(
    waiter: Waiter,
    submittedAt: number,
    work: Effect.Effect<A, E, R>,
    describe: Effect.Effect<string>
  ): Effect.Effect<A, E | QueueTimeout, R> =>
    Effect.flatMap(Clock.currentTimeMillis, (now) =>
      Effect.flatten(Effect.timeoutTo(work, {
        duration: Duration.millis(Math.max(0, queueTimeoutMillis - (now - submittedAt))),
        onSuccess: (a): Effect.Effect<A, QueueTimeout> => Effect.succeed(a),
        onTimeout: () =>
          Effect.flatMap(describe, (reason) => Effect.fail(new QueueTimeout({ lane: waiter, waitedMillis: queueTimeoutMillis, reason })))
      })))

  const beforeQueue: Scheduler["Type"]["beforeQueue"] = (waiter, submittedAt, work) =>
    untilDeadline(
      waiter,
      submittedAt,
      work,
      Effect.map(worker.readiness, (r) =>
        r.state === "ready" ? "preparing the prompt (the engine is ready)" : `waiting for ${engineWait} (${stateOf(r)})`)
    )

  /**
   * Runs `wait` as a queued request: refused when the queue is full, failed with QueueTimeout
   * (naming what it was waiting for) when its deadline passes, then counted as running for the scope.
   */
  const queue = <A, E>(
    lane: Lane,
    submittedAt: number | undefined,
    wait: (stage: (waitingFor: string) => Effect.Effect<void>) => Effect.Effect<A, E, Scope.Scope>
  ) =>
    Effect.gen(function*() {
      const start = yield* Clock.currentTimeMillis
      if (total(queuedIn) >= config.maxQueued) return yield* new QueueFull({ lane, limit: config.maxQueued })
      const index = lanes.indexOf(lane)
      queuedIn[index]!++
      let waitingFor = "a slot"
      const result = yield* untilDeadline(
        lane,
        submittedAt ?? start,
        wait((next) => Effect.sync(() => void (waitingFor = next))),
        Effect.suspend(() =>
          waitingFor === engineWait
            ? Effect.map(worker.readiness, (r) => `waiting for ${waitingFor} (${stateOf(r)})`)
            : Effect.succeed(`waiting for ${waitingFor}`)
        )
      ).pipe(Effect.ensuring(Effect.sync(() => void queuedIn[index]!--)))
      yield* Effect.acquireRelease(Effect.sync(() => void runningIn[index]!++), () => Effect.sync(() => void runningIn[index]!--))
      return { result, queuedMillis: (yield* Clock.currentTimeMillis) - start }
    })

  // The configured sizes are validated above, so an invalid charge is a defect.
  const workspace = (lane: Lane, bytes: number, label: string) =>
    Effect.catchTag(admission.workspace({ lane, bytes, label }), "InvalidCharge", Effect.die)

  /**
   * A sequence for a request without a conversation: a free anonymous one; else, at once, a free
   * conversation slot that no conversation owns (its sequence is idle: borrowing it costs no
   * memory and no conversation's cache); else it waits for an anonymous one.
   */
  const anonymousSlot = (lane: Lane) =>
    Effect.gen(function*() {
      const own = yield* anonymous.tryAcquire({ lane })
      if (own !== undefined) return { ...own, slot: config.slots + own.slot }
      const borrowed = yield* slots.tryAcquire({ lane, unownedOnly: true })
      if (borrowed !== undefined) return borrowed
      return yield* Effect.map(anonymous.acquire({ lane }), (g) => ({ ...g, slot: config.slots + g.slot }))
    })

  const generation = (ticket: GenerationTicket) =>
    Effect.map(
      queue(ticket.lane, ticket.submittedAt, (stage) =>
        Effect.gen(function*() {
          const grant = ticket.conversation === undefined
            ? yield* anonymousSlot(ticket.lane)
            : yield* slots.acquire({ lane: ticket.lane, conversation: ticket.conversation })
          yield* stage(engineWait)
          yield* engineReady
          yield* stage("workspace memory")
          yield* workspace(ticket.lane, config.generationWorkspaceBytes, ticket.label)
          return grant
        })),
      ({ queuedMillis, result }): GenerationGrant => ({ slot: result.slot, evicted: result.evicted, queuedMillis })
    )

  const decision = (label: string, heads: number, submittedAt?: number) =>
    Effect.map(
      queue("decision", submittedAt, (stage) =>
        Effect.gen(function*() {
          yield* stage(engineWait)
          yield* engineReady
          yield* stage("workspace memory")
          yield* workspace("decision", Math.max(1, heads) * config.decisionWorkspaceBytesPerHead, label)
        })),
      ({ queuedMillis }) => ({ queuedMillis })
    )

  return Scheduler.of({
    generation,
    decision,
    beforeQueue,
    slotOf: slots.slotOf,
    status: Effect.map(slots.status, (s) => ({
      running: total(runningIn),
      queued: total(queuedIn),
      slots: s.slots + config.anonymousSlots,
      conversations: s.owned,
      idleConversationSlots: s.slots - s.busy,
      lanes: lanes.map((lane, i) => ({ lane, running: runningIn[i]!, queued: queuedIn[i]! }))
    }))
  })
})

export const layer: Layer.Layer<Scheduler, never, SchedulerConfig | NativeWorker | Admission> = Layer.effect(Scheduler, make)
