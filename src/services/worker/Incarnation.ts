/**
 * One engine child with both roles loaded and warmed, as a scoped resource: acquiring it acquires
 * the child's resources, spawns it, completes hello, has admission charge its models, loads and
 * warms each role; closing its scope stops the child (gracefully, then SIGTERM and SIGKILL) and
 * only then releases what it held. Any failure of the acquisition is a `ChildFailed`. A serving
 * incarnation is reported broken through `broken` (its own exit watcher does so when it exits).
 */
import * as Cause from "effect/Cause"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as Crypto from "node:crypto"
import { type EngineChild, spawn } from "../../native/ChildProcess.js"
import type { HelloInfo, LoadedModel } from "../../native/Protocol.js"
import { ChildFailed, childFailure, guarded, unavailable } from "./ChildFaults.js"
import { NativeWorkerConfig, type NativeWorkerConfigShape } from "./NativeWorkerConfig.js"
import type { EngineState } from "../../domain/Inference.js"
import { ChildResources, type Planner, WorkerAdmission } from "./WorkerHooks.js"

export interface Incarnation {
  readonly number: number
  readonly child: EngineChild
  readonly hello: HelloInfo
  readonly models: ReadonlyArray<LoadedModel>
  /** Completed (once) with the first failure reported for this child. */
  readonly broken: Deferred.Deferred<ChildFailed>
}

/** The stages of a start, as the worker reports them. */
export type Stage = Extract<EngineState, "starting" | "loading" | "warming">

/** Acquires incarnation `number` in the current scope, reporting each stage. */
export type Acquire = (number: number, onStage: (stage: Stage) => Effect.Effect<void>) => Effect.Effect<Incarnation, ChildFailed, Scope.Scope>

export const makeAcquire: Effect.Effect<Acquire, never, NativeWorkerConfig | WorkerAdmission | ChildResources> = Effect.gen(
  function*() {
    const config = yield* NativeWorkerConfig
    const admission = yield* WorkerAdmission
    const resources = yield* ChildResources
    return (number, onStage) =>
      acquire(config, admission, resources, number, onStage).pipe(
        // Whatever ends a start (a defect included) is a failed start, so the supervisor always gets an answer.
        Effect.catchAllCause((cause) =>
          Cause.isInterruptedOnly(cause)
            ? Effect.interrupt
            : Effect.fail(Option.match(Cause.failureOption(cause), {
              onNone: () => new ChildFailed({ kind: "start", reason: `defect: ${Cause.pretty(cause)}` }),
              onSome: (e): ChildFailed => e
            }))
        )
      )
  }
)

const acquire = (
  config: NativeWorkerConfigShape,
  admission: WorkerAdmission["Type"],
  resources: ChildResources["Type"],
  number: number,
  onStage: (stage: Stage) => Effect.Effect<void>
): Effect.Effect<Incarnation, ChildFailed, Scope.Scope> =>
  Effect.gen(function*() {
    yield* onStage("starting")
    yield* resources.acquire.pipe(
      Effect.mapError((e) => new ChildFailed({ kind: "start", reason: `cannot acquire child resources: ${e.message}` }))
    )
    const child = yield* spawn({
      settings: config.child,
      env: config.childEnv,
      incarnation: number,
      execPath: config.execPath,
      stopTimeout: config.stopTimeout
    }).pipe(Effect.mapError((e) => new ChildFailed({ kind: "start", reason: e.message })))
    const hello = yield* guarded(child, child.client.Hello(), config.startDeadline)
    const contexts = yield* admission.admit(hello, planOn(child, config.stepDeadline)).pipe(
      // A child that failed while planning is a child fault (restart); anything else is a refusal.
      Effect.mapError((e) => new ChildFailed({ kind: e._tag === "EngineUnavailable" ? "start" : "admission", reason: e.message }))
    )
    yield* onStage("loading")
    const models: Array<LoadedModel> = []
    for (const role of ["generation", "decision"] as const) {
      const model = config.models[role]
      if (model === undefined) continue
      const before = yield* guarded(child, child.client.Memory(), config.stepDeadline)
      const loaded = yield* child.client.Load({
        role,
        modelPath: model.modelPath,
        contextSize: contexts[role] ?? model.contextSize,
        sequences: model.sequences ?? 1
      }).pipe(
        // The load deadline restarts with every progress event.
        Stream.timeoutFail(
          () => new ChildFailed({ kind: "hang", reason: `load of ${role} made no progress for ${Duration.format(config.loadDeadline)}` }),
          config.loadDeadline
        ),
        Stream.runFold(undefined as LoadedModel | undefined, (last, e) => (e._tag === "Loaded" ? e.model : last)),
        Effect.catchTag("RpcClientError", (e) => childFailure(child, e.message)),
        // The engine answered with a typed refusal: the model, not the child, is at fault.
        Effect.catchIf(
          (e) => e._tag !== "ChildFailed",
          (e) => Effect.fail(new ChildFailed({ kind: "load", role, reason: `load of ${role} failed: ${e.message}` }))
        )
      )
      if (loaded === undefined) {
        return yield* new ChildFailed({ kind: "start", reason: `load of ${role} ended without a model` })
      }
      models.push(loaded)
      yield* onStage("warming")
      // Warm-up touches the role's buffers, so the growth measured after it is real allocation.
      yield* warm(child, loaded, config)
      const after = yield* guarded(child, child.client.Memory(), config.stepDeadline)
      yield* admission.measured(role, {
        rssBytes: after.rssBytes - before.rssBytes,
        vramBytes: after.vramUsedBytes - before.vramUsedBytes
      })
    }
    const broken = yield* Deferred.make<ChildFailed>()
    // Watch the process: an exit while serving is a failure (stopping on purpose interrupts this first).
    yield* child.exited.pipe(
      Effect.flatMap((exit) =>
        Deferred.succeed(broken, new ChildFailed({ kind: "exit", reason: `engine child ${child.pid} ${exit.description}` }))
      ),
      Effect.forkScoped
    )
    return { number, child, hello, models, broken }
  })

/** One tiny generation, or one score: proves a role works before the child takes requests. */
const warm = (child: EngineChild, model: LoadedModel, config: NativeWorkerConfigShape) =>
  Effect.gen(function*() {
    const prompt = yield* guarded(
      child,
      child.client.Render({ role: model.role, messages: [{ role: "user", content: "hi" }] }),
      config.stepDeadline
    )
    if (model.role === "generation") {
      const generationId = `warm-${Crypto.randomUUID()}`
      yield* guarded(
        child,
        child.client.Begin({
          generationId,
          lane: "foreground",
          sequence: 0,
          prompt,
          sampling: { temperature: 0 },
          maxTokens: 1,
          stopTokens: [],
          prefillChunk: config.prefillChunk
        }),
        config.stepDeadline
      )
      yield* guarded(child, Stream.runDrain(child.client.Advance({ generationId, fromIndex: 0 })), config.stepDeadline)
      yield* guarded(child, child.client.End({ generationId }), config.stepDeadline)
    } else {
      yield* guarded(
        child,
        Stream.runDrain(child.client.Score({
          prompt,
          heads: [{ name: "warm-up", labels: ["yes", "no"] }],
          prefillChunk: config.prefillChunk
        })),
        config.stepDeadline
      )
    }
  }).pipe(
    Effect.catchIf(
      (e) => e._tag !== "ChildFailed",
      (e) => Effect.fail(new ChildFailed({ kind: "start", reason: `warm-up of ${model.role} failed: ${e.message}` }))
    )
  )

/** Plans on a child that is starting (it is not `ready` yet, so the worker's `plan` cannot be used). */
const planOn = (child: EngineChild, stepDeadline: Duration.Duration): Planner => (modelPath, contextSizes, sequences) =>
  unavailable(guarded(child, child.client.Plan({ modelPath, contextSizes, sequences }), stepDeadline))
