/**
 * Effect's built-in fiber metrics (fibers started and active, their lifetimes, successes and
 * failures) updated at every fiber's start and exit: nothing here reads them, and on the request
 * path they cost several percent of the process's CPU. These turn them off for a region (its
 * forks inherit the setting): the programs' entry points and each RPC request, whose fibers
 * @effect/rpc starts with the default flags.
 */
import * as Effect from "effect/Effect"
import * as RuntimeFlags from "effect/RuntimeFlags"
import * as RuntimeFlagsPatch from "effect/RuntimeFlagsPatch"
import * as Stream from "effect/Stream"

const off = RuntimeFlagsPatch.disable(RuntimeFlags.RuntimeMetrics)

/** `self` (and every fiber it forks) without fiber metrics. */
export const withoutFiberMetrics = <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.withRuntimeFlagsPatch(self, off)

/** `self`, run without fiber metrics (the running fiber's setting is restored when it ends). */
export const streamWithoutFiberMetrics = <A, E, R>(self: Stream.Stream<A, E, R>): Stream.Stream<A, E, R> =>
  Stream.unwrapScoped(Effect.as(Effect.withRuntimeFlagsPatchScoped(off), self))
