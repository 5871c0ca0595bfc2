/**
 * How a call on an engine child fails because of the child: transport failures (the RPC client's
 * `RpcClientError`, socket defects), replies that fail their schema, a connection closed under the
 * call, and missed progress deadlines all become `ChildFailed`, told apart into exit, hang and
 * protocol faults. Engine errors (the child's typed answers) pass through unchanged.
 */
import * as Socket from "@effect/platform/Socket"
import type { RpcClientError } from "@effect/rpc/RpcClientError"
import * as Cause from "effect/Cause"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import * as Stream from "effect/Stream"
import { type EngineError, EngineUnavailable } from "../../domain/EngineError.js"
import type { EngineChild } from "../../native/ChildProcess.js"
import type { RecoveryAction } from "./Readiness.js"
import type { Role } from "../../native/Protocol.js"

/** Why a call did not complete on its child: the child is broken (repair) or gone. */
export class ChildFailed extends Data.TaggedError("ChildFailed")<{
  readonly kind: RecoveryAction["kind"]
  readonly reason: string
  /** The role whose model the engine refused to load (kind `load`). */
  readonly role?: Role | undefined
}> {
  override get message() {
    return this.reason
  }
}

/** What an engine call can fail with besides its transport: the engine's own typed errors. */
export type TaggedFailure = { readonly _tag: string; readonly message: string }

/** Admission and a model's refusal to load are deterministic: restarting would only repeat them. */
export const isRestartable = (failure: ChildFailed): boolean => failure.kind !== "admission" && failure.kind !== "load"

/** A transport failure: the child's exit, when the process reports one promptly, else a protocol fault. */
export const childFailure = (child: EngineChild, message: string): Effect.Effect<never, ChildFailed> =>
  Effect.flatMap(Effect.timeoutOption(child.exited, "250 millis"), (exit) =>
    Effect.fail(
      Option.isSome(exit)
        ? new ChildFailed({ kind: "exit", reason: `engine child ${child.pid} ${exit.value.description}` })
        : new ChildFailed({ kind: "protocol", reason: `protocol failure: ${message}` })
    ))

/**
 * A defect of a call that is the child's fault: the RPC client dies on a socket write to a child
 * that is gone (EPIPE), and on a reply that fails its schema inside a valid frame.
 */
const childDefect = (child: EngineChild, defect: unknown): Option.Option<Effect.Effect<never, ChildFailed>> =>
  Socket.isSocketError(defect)
    ? Option.some(childFailure(child, defect.message))
    : ParseResult.isParseError(defect)
    ? Option.some(Effect.fail(new ChildFailed({ kind: "protocol", reason: `a reply failed its schema: ${defect.message}` })))
    : Option.none()

/**
 * Runs a call on a child with a progress deadline (none: the call has its own, per stream event);
 * transport failures, replies that fail their schema and hangs become ChildFailed.
 */
export const guarded = <A, E extends TaggedFailure>(
  child: EngineChild,
  call: Effect.Effect<A, E | RpcClientError>,
  deadline: Duration.Duration | undefined
): Effect.Effect<A, Exclude<E, { readonly _tag: "RpcClientError" }> | ChildFailed> => {
  // A call to a stuck child cannot be interrupted promptly (the interrupt waits on the child):
  // the deadline abandons it, and it ends when the child is stopped.
  // A call cut off by its connection closing (the broken child's client is being torn down)
  // ends as an interruption of the call alone: that is the child's failure, not the caller's.
  const disconnected = call.pipe(
    Effect.catchAllCause((cause): Effect.Effect<A, E | RpcClientError | ChildFailed> =>
      Cause.isInterruptedOnly(cause)
        ? Effect.fail(new ChildFailed({ kind: "protocol", reason: "the engine connection closed during the call" }))
        : Effect.failCause(cause)
    ),
    Effect.disconnect
  )
  const bounded = deadline === undefined ? disconnected : Effect.timeoutFail(disconnected, {
    duration: deadline,
    onTimeout: () => new ChildFailed({ kind: "hang", reason: `no progress for ${Duration.format(deadline)}` })
  })
  return bounded.pipe(
    Effect.catchTag("RpcClientError", (e) => childFailure(child, e.message)),
    Effect.catchSomeDefect((defect) => childDefect(child, defect))
  )
}

/**
 * A streamed call with the step deadline per event; transport failures, replies that fail their
 * schema and hangs go to `onChildFailed` (one handler on the stream: nothing more per event).
 */
export const guardedStream = <A, A2, E2>(
  child: EngineChild,
  stream: Stream.Stream<A, EngineError | RpcClientError>,
  stepDeadline: Duration.Duration,
  onChildFailed: (failure: ChildFailed) => Stream.Stream<A2, E2>
): Stream.Stream<A | A2, EngineError | E2> => {
  const timed = stream.pipe(
    Stream.catchSomeCause((cause) =>
      Cause.isInterruptedOnly(cause)
        ? Option.some(Stream.fail(new ChildFailed({ kind: "protocol", reason: "the engine connection closed mid-stream" })))
        : Option.map(Option.flatMap(Cause.dieOption(cause), (defect) => childDefect(child, defect)), Stream.fromEffect)
    ),
    Stream.timeoutFail(
      () => new ChildFailed({ kind: "hang", reason: `no step for ${Duration.format(stepDeadline)}` }),
      stepDeadline
    )
  )
  // One handler, run only when the stream fails: nothing more per event.
  return Stream.catchAll(timed, (e) =>
    Stream.unwrap(
      Effect.fail(e).pipe(
        Effect.catchTag("RpcClientError", (e) => childFailure(child, e.message)),
        Effect.catchTag("ChildFailed", (failure) => Effect.succeed(onChildFailed(failure)))
      )
    ))
}

/** A child failure, for a caller: the engine is unavailable, with the reason. */
export const unavailable = <A, E extends TaggedFailure, R>(self: Effect.Effect<A, E | ChildFailed, R>): Effect.Effect<A, E | EngineUnavailable, R> =>
  Effect.catchTag(self, "ChildFailed", (e) => Effect.fail(new EngineUnavailable({ reason: e.message })))

/**
 * Idempotent calls (and a generation's Begin, before anything was delivered) that were lost with
 * their child are retried once on the replacement: a request that arrives just as the child dies,
 * before the worker has noticed, waits for the repair instead of failing.
 */
export const retryOnce = <A, E extends TaggedFailure, R>(self: Effect.Effect<A, E | ChildFailed, R>): Effect.Effect<A, E | ChildFailed, R> =>
  Effect.catchTag(self, "ChildFailed", () => self)
