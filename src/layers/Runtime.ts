/**
 * The live runtime: wiring only. Store (with the packaged seed imported) -> the model each role
 * runs, leased for as long as an engine child may map it -> NativeWorker, whose first child's
 * inventory gives Admission its device budget and whose models load at the contexts Admission
 * admits -> Scheduler -> Provider.
 *
 * `layer` is the store-backed runtime (what `nativegen serve` runs); `layerWithModels` loads
 * model files by path (tests, development) with everything else the same.
 *
 * Recovery at start (store-backed): each role tries its candidates in the store's order (its
 * activations from the newest, then the packaged seed). An activation that no longer verifies is
 * passed over; a model the engine refuses to load is replaced by the role's next candidate in a
 * fresh engine. Each is logged and listed in readiness's recovery actions; the start fails only
 * when a role has no candidate left, with every reason.
 *
 * Both layers fail with `RuntimeStartError` (see `RuntimeError`): the store unavailable, a role
 * with no loadable model, no context admitted, or the engine not started.
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as ExecutionStrategy from "effect/ExecutionStrategy"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import type { Role } from "../domain/Inference.js"
import { EngineUnavailable, type ModelLoadFailed } from "../domain/EngineError.js"
import * as Path from "node:path"
import * as Admission from "../services/Admission.js"
import * as Conversations from "../services/Conversations.js"
import * as NativeWorker from "../services/NativeWorker.js"
import * as Provider from "../services/Provider.js"
import * as Scheduler from "../services/Scheduler.js"
import * as Store from "../services/Store.js"
import { ggufMediaType } from "../domain/Manifest.js"
import { NoLoadableModel, type RuntimeStartError, toStartError } from "./RuntimeError.js"

export {
  ContextAdmissionFailed,
  type EngineStartCause,
  EngineStartFailed,
  NoLoadableModel,
  type RuntimeStartError,
  type StoreOpenError,
  StoreUnavailable
} from "./RuntimeError.js"

export interface RuntimeOptions {
  readonly store: Partial<Store.StoreConfigShape>
  /**
   * Where conversations' state files go (a subdirectory per model digest). Default: the store's
   * `conversations/` directory for the store-backed runtime; none (nothing saved) by path.
   */
  readonly conversationsDirectory: string | undefined
  /** State files kept per model (least recently saved deleted first). Default 32. */
  readonly conversationsMaxSaved: number | undefined
  /** Bounds on conversations' records in memory and refused files on disk (defaults in ConversationsConfig). */
  readonly conversations: Pick<Conversations.ConversationsConfig.Options, "maxHeldConversations" | "maxHeldBytes" | "maxMovedAside">
  readonly admission: Partial<Admission.AdmissionConfigShape>
  readonly worker: Partial<NativeWorker.NativeWorkerConfigShape>
  readonly scheduler: Partial<Scheduler.SchedulerConfigShape>
}

/** A role's model file and, when it comes from the store, its revision and the leases that keep it. */
interface RoleSource {
  readonly modelPath: string
  /** sha256 of the model file (state files are bound to it); computed from the file when absent. */
  readonly digest?: string | undefined
  readonly revision?: NativeWorker.RoleModel["revision"]
}

/** The engine refused a role's model (when planning or loading it): another model may do (internal to the start). */
class RoleLoadFailed extends Data.TaggedError("RoleLoadFailed")<{
  readonly role: Role
  readonly reason: string
}> {
  override get message() {
    return `the ${this.role} model did not load: ${this.reason}`
  }
}

/**
 * The engine side: worker, admission, scheduler and provider over the given role models.
 * Fails with Admission's typed error when no context fits, RoleLoadFailed when the engine refused
 * a role's model, or EngineUnavailable when the first engine child never got as far as admission.
 */
const engine = (
  models: { readonly [R in Role]?: RoleSource | undefined },
  options: Partial<RuntimeOptions>,
  childResources: Layer.Layer<NativeWorker.ChildResources> = NativeWorker.ChildResources.layerNoop,
  recoveryActions?: ReadonlyArray<NativeWorker.RecoveryAction>
) =>
  Effect.gen(function*() {
    const schedulerConfig = { ...Scheduler.SchedulerConfig.defaults, ...options.scheduler }
    const admissionConfig = { ...Admission.AdmissionConfig.defaults, ...options.admission }
    const sequences: { readonly [R in Role]: number } = { generation: Scheduler.sequencesOf(schedulerConfig), decision: 1 }
    const roles: { [R in Role]?: Admission.RoleRequest } = {}
    const roleModels: { [R in Role]?: NativeWorker.RoleModel } = {}
    for (const role of ["generation", "decision"] as const) {
      const source = models[role]
      if (source === undefined) continue
      roles[role] = { modelPath: source.modelPath, sequences: sequences[role] }
      roleModels[role] = {
        modelPath: source.modelPath,
        contextSize: admissionConfig.contextCap[role],
        sequences: sequences[role],
        revision: source.revision
      }
    }
    const bridge = yield* Admission.forWorker(roles).pipe(Effect.provideService(Admission.AdmissionConfig, admissionConfig))
    const workerConfig: NativeWorker.NativeWorkerConfigShape = {
      ...NativeWorker.NativeWorkerConfig.defaults,
      ...options.worker,
      models: roleModels,
      recoveryActions
    }
    const worker = yield* NativeWorker.make.pipe(
      Effect.provideService(NativeWorker.NativeWorkerConfig, workerConfig),
      Effect.provideService(NativeWorker.WorkerAdmission, bridge.hooks),
      Effect.provide(childResources)
    )
    const started = yield* worker.readiness
    if (started.loadFailure !== undefined) return yield* new RoleLoadFailed(started.loadFailure)
    const roleOf = (modelPath: string) => (["generation", "decision"] as const).find((role) => models[role]?.modelPath === modelPath)
    // The worker is built once its first child is ready or has failed; a child that never reached
    // admission leaves the service without a budget, so the runtime cannot start.
    const admission = yield* Effect.raceFirst(
      bridge.admission,
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
    const context = Context.make(NativeWorker.NativeWorker, worker).pipe(Context.add(Admission.Admission, admission))
    const scheduler = yield* Scheduler.make.pipe(
      Effect.provide(context),
      Effect.provideService(Scheduler.SchedulerConfig, schedulerConfig)
    )
    const generation = models.generation
    const conversations = yield* Conversations.make.pipe(
      Effect.provide(context),
      Effect.provide(Conversations.ConversationsConfig.layer({
        ...options.conversations,
        directory: options.conversationsDirectory,
        maxSaved: options.conversationsMaxSaved,
        // State files are bound to the model's digest; without a directory nothing is saved, and
        // a model given by path is not read through just to name one.
        modelDigest: generation === undefined || options.conversationsDirectory === undefined
          ? generation?.digest ?? "unsaved"
          : generation.digest ?? (yield* Effect.provide(Conversations.digestOfFile(generation.modelPath), NodeFileSystem.layer))
      })),
      Effect.provide(NodeFileSystem.layer)
    )
    const services = context.pipe(
      Context.add(Scheduler.Scheduler, scheduler),
      Context.add(Conversations.Conversations, conversations)
    )
    const provider = yield* Provider.make.pipe(
      Effect.provide(services),
      Effect.provideService(Provider.ProviderConfig, { prefillChunk: workerConfig.prefillChunk })
    )
    return Context.add(services, Provider.Provider, provider)
  })

/** The runtime over model files given by path (no store). A model the engine refuses leaves its role with `NoLoadableModel`. */
export const layerWithModels = (
  models: { readonly [R in Role]?: string | undefined },
  options: Partial<RuntimeOptions> = {}
) =>
  Layer.scopedContext(
    engine(
      {
        generation: models.generation === undefined ? undefined : { modelPath: models.generation },
        decision: models.decision === undefined ? undefined : { modelPath: models.decision }
      },
      options
    ).pipe(
      Effect.catchTag("RoleLoadFailed", (e) =>
        Effect.fail(new NoLoadableModel({ role: e.role, reasons: [`${models[e.role]} did not load: ${e.reason}`] }))),
      Effect.mapError((e): RuntimeStartError => toStartError(e))
    )
  )

const roles = ["generation", "decision"] as const

type Usable = Store.ModelRevision & { readonly journalLine: number | undefined }

const describe = (model: Usable) =>
  `${model.model} revision ${model.revision}${model.journalLine === undefined ? " (packaged seed)" : ""}`

/** The store-backed runtime: the seed is imported where needed; each role runs the first of its candidates that loads. */
export const layer = (options: Partial<RuntimeOptions> = {}) =>
  Layer.scopedContext(
    Effect.gen(function*() {
      const store = yield* Store.Store
      const layerScope = yield* Effect.scope
      const actions: Array<NativeWorker.RecoveryAction> = []
      const record = (action: Omit<NativeWorker.RecoveryAction, "at">) =>
        Effect.flatMap(Clock.currentTimeMillis, (now) =>
          Effect.zipRight(
            Effect.sync(() => actions.push({ ...action, at: new Date(now) })),
            Effect.logWarning(`${action.kind}: ${action.reason}`).pipe(Effect.annotateLogs({ service: "Runtime", outcome: action.outcome }))
          ))

      // A seed that cannot be imported is no reason not to start on what the journal has.
      const seeded = yield* Effect.either(store.importSeed)
      const seedFailure = Either.isLeft(seeded) ? [`the packaged seed was not imported: ${seeded.left.message}`] : []
      if (Either.isLeft(seeded)) yield* Effect.logWarning(seedFailure[0]).pipe(Effect.annotateLogs({ service: "Runtime" }))

      const queues = {
        generation: [...(yield* store.candidates("generation"))],
        decision: [...(yield* store.candidates("decision"))]
      }
      const reasons: { [R in Role]: Array<string> } = { generation: [], decision: [] }

      /** The role's next usable candidate, and the ones passed over on the way. */
      const next = (role: Role) => {
        const passed: Array<Store.PassedOver> = []
        while (queues[role].length > 0) {
          const candidate = queues[role].shift()!
          if (Either.isRight(candidate)) return { found: candidate.right, passed }
          passed.push(candidate.left)
        }
        return { found: undefined, passed }
      }

      const fallsBackTo = (role: Role, found: Usable | undefined) =>
        found === undefined ? `nothing left for ${role}` : `${role} falls back to ${describe(found)}`

      /** Records the passed-over activations; fails when the role has nothing left. */
      const settle = (role: Role, { found, passed }: ReturnType<typeof next>) =>
        Effect.gen(function*() {
          for (const p of passed) {
            const why = `${p.model} revision ${p.revision} (journal line ${p.journalLine}) passed over: ${p.reason}`
            reasons[role].push(why)
            yield* record({ kind: "trust", reason: `${why}; ${fallsBackTo(role, found)}`, outcome: found === undefined ? "failed" : "fell-back" })
          }
          if (found === undefined) return yield* new NoLoadableModel({ role, reasons: [...reasons[role], ...seedFailure] })
          return found
        })

      const sourceOf = (model: Usable): RoleSource => {
        const gguf = model.artifacts.find((a) => a.mediaType === ggufMediaType) ?? model.artifacts[0]!
        return {
          modelPath: gguf.path,
          digest: gguf.digest.replace(/^sha256:/, ""),
          revision: { manifestDigest: model.manifestDigest, revision: model.revision }
        }
      }

      /** One engine over the chosen models, in a scope of its own: closed again when it fails. */
      const start = (chosen: { readonly [R in Role]: Usable }) =>
        Effect.gen(function*() {
          const scope = yield* Scope.fork(layerScope, ExecutionStrategy.sequential)
          // Each child holds reader leases on what it maps, released only after its exit.
          const leases = Effect.forEach(
            roles.flatMap((role) => chosen[role].artifacts.map((a) => a.digest)),
            (digest) => store.lease(digest),
            { discard: true }
          )
          return yield* engine(
            { generation: sourceOf(chosen.generation), decision: sourceOf(chosen.decision) },
            { ...options, conversationsDirectory: options.conversationsDirectory ?? Path.join(store.root, "conversations") },
            NativeWorker.ChildResources.layer(leases),
            [...actions]
          ).pipe(Scope.extend(scope), Effect.onError(() => Scope.close(scope, Exit.void)))
        })

      const chosen = { generation: yield* settle("generation", next("generation")), decision: yield* settle("decision", next("decision")) }
      for (;;) {
        const started = yield* Effect.either(start(chosen))
        if (Either.isRight(started)) return Context.add(started.right, Store.Store, store)
        const failure = started.left
        if (failure._tag !== "RoleLoadFailed") return yield* Effect.fail(failure)
        const { role } = failure
        const failed = chosen[role]
        const replacement = next(role)
        reasons[role].push(`${describe(failed)} did not load: ${failure.reason}`)
        yield* record({
          kind: "load",
          reason: `${describe(failed)} did not load for ${role}: ${failure.reason}; ${fallsBackTo(role, replacement.found)}`,
          outcome: replacement.found === undefined ? "failed" : "fell-back"
        })
        chosen[role] = yield* settle(role, replacement)
      }
    })
  ).pipe(
    Layer.provide(Store.layer),
    Layer.provide(Store.StoreConfig.layer(options.store ?? {})),
    Layer.mapError((e): RuntimeStartError => toStartError(e))
  )
