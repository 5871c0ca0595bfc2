/**
 * The engine's start check: a layer with no service that, once the NativeWorker is built (its
 * first child ready or failed), says whether the runtime can start on it. A role's model the
 * engine refused (to plan or to load) is RoleLoadFailed, which the store-backed runtime answers
 * with the role's next candidate; admission's refusal is its typed error; a first child that
 * never got as far as admission is EngineUnavailable.
 */
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Stream from "effect/Stream"
import type { Role } from "../domain/Inference.js"
import { EngineUnavailable, type ModelLoadFailed } from "../domain/EngineError.js"
import { FirstAdmission } from "../services/admission/WorkerAdmissionLive.js"
import { NativeWorker } from "../services/NativeWorker.js"

/** The engine refused a role's model (when planning or loading it): another model may do (internal to the start). */
export class RoleLoadFailed extends Data.TaggedError("RoleLoadFailed")<{
  readonly role: Role
  readonly reason: string
}> {
  override get message() {
    return `the ${this.role} model did not load: ${this.reason}`
  }
}

/** Fails the build unless the worker's first admission succeeded and no role's model was refused. */
export const layer = (models: { readonly [R in Role]?: { readonly modelPath: string } | undefined }) =>
  Layer.effectDiscard(Effect.gen(function*() {
    const worker = yield* NativeWorker
    const first = yield* FirstAdmission
    const started = yield* worker.readiness
    if (started.loadFailure !== undefined) return yield* new RoleLoadFailed(started.loadFailure)
    const roleOf = (modelPath: string) => (["generation", "decision"] as const).find((role) => models[role]?.modelPath === modelPath)
    // A child that never reached admission leaves Admission without a budget: the runtime cannot start.
    yield* Effect.raceFirst(
      first.result,
      worker.states.pipe(
        Stream.filter((s) => s === "failed" || s === "stopped"),
        Stream.runHead,
        Effect.zipRight(worker.readiness),
        Effect.flatMap((r) => Effect.fail(new EngineUnavailable({ reason: r.reason ?? r.state })))
      )
    ).pipe(
      // A model the engine cannot even plan is refused when admission plans it.
      Effect.catchTag("ModelLoadFailed", (e): Effect.Effect<never, ModelLoadFailed | RoleLoadFailed> => {
        const role = roleOf(e.modelPath)
        return role === undefined ? Effect.fail(e) : Effect.fail(new RoleLoadFailed({ role, reason: e.message }))
      })
    )
  }))
