/**
 * What a NativeWorker asks of its surroundings around each engine child, as services with no-op
 * layers (the worker runs alone on `layerNoop`s; the runtime provides the live ones): admission of
 * each incarnation's models, and the resources each child holds for its whole life.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import type { EngineError, EngineUnavailable } from "../../domain/EngineError.js"
import type { HelloInfo, ModelPlan, Role } from "../../native/Protocol.js"

/** The engine's native allocation plan of a model over candidate context sizes, without loading it. */
export type Planner = (
  modelPath: string,
  contextSizes: ReadonlyArray<number>,
  sequences: number
) => Effect.Effect<ModelPlan, EngineError | EngineUnavailable>

/** Memory growth the child really showed across a role's load and warm-up. */
export interface MeasuredGrowth {
  readonly rssBytes: number
  readonly vramBytes: number
}

/**
 * Device admission of each incarnation's models. `admit` runs after hello and before any load, in
 * the incarnation's scope: it charges what the roles will take and says which context to load
 * each with (a role it leaves out loads at its configured context). A refusal is not a child
 * fault: the worker reports `failed` with its message and does not restart. A failure tagged
 * `EngineUnavailable` is the child's (it failed while planning): the worker restarts it.
 * `measured` follows each role's load and warm-up.
 */
export class WorkerAdmission extends Context.Tag("nativegen/WorkerAdmission")<WorkerAdmission, {
  readonly admit: (
    hello: HelloInfo,
    plan: Planner
  ) => Effect.Effect<
    { readonly [R in Role]?: number | undefined },
    { readonly _tag: string; readonly message: string },
    Scope.Scope
  >
  readonly measured: (role: Role, growth: MeasuredGrowth) => Effect.Effect<void>
}>() {
  /** Every role loads at its configured context; nothing is charged. */
  static readonly layerNoop: Layer.Layer<WorkerAdmission> = Layer.succeed(WorkerAdmission, {
    admit: () => Effect.succeed({}),
    measured: () => Effect.void
  })
}

/**
 * Resources each child holds for its whole life, typically the Store's reader leases on the model
 * artifacts. `acquire` runs in the incarnation's scope before the child is spawned; the scope
 * closes only after the child's exit has been observed (so a reap can never delete a file a live
 * or dying child has mapped). A failure is a failed start, named by its message.
 */
export class ChildResources extends Context.Tag("nativegen/ChildResources")<ChildResources, {
  readonly acquire: Effect.Effect<void, { readonly message: string }, Scope.Scope>
}>() {
  static readonly layerNoop: Layer.Layer<ChildResources> = Layer.succeed(ChildResources, { acquire: Effect.void })

  /** Holds what `acquire` acquires, per child. */
  static readonly layer = <E extends { readonly message: string }>(
    acquire: Effect.Effect<unknown, E, Scope.Scope>
  ): Layer.Layer<ChildResources> => Layer.succeed(ChildResources, { acquire: Effect.asVoid(acquire) })
}

/** Both hooks as no-ops: a worker on its own, loading each role at its configured context. */
export const layerNoop: Layer.Layer<WorkerAdmission | ChildResources> = Layer.merge(
  WorkerAdmission.layerNoop,
  ChildResources.layerNoop
)
