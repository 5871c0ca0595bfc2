/**
 * The live runtime: a composition of the services' layers.
 *
 *   Provider <- Conversations, Scheduler <- StartCheck <- NativeWorker <- WorkerAdmissionLive
 *            <- Admission <- DeviceInventory, each with its config layer
 *
 * The worker's first child publishes its inventory to the DeviceInventory, from which Admission
 * reads the device budget; the worker loads its models at the contexts Admission admits. The
 * store-backed `layer` leases, for as long as an engine child may map it, the model each role runs
 * (what `nativegen serve` runs); `layerWithModels` loads model files by path (tests, development)
 * with everything else the same.
 *
 * Recovery at start (store-backed): each role tries its candidates in the store's order (its
 * activations from the newest, then the packaged seed). An activation that no longer verifies is
 * passed over; a model the engine refuses to load is replaced by the role's next candidate in a
 * fresh engine (the engine's layer built again in a scope of its own). Each is logged and listed
 * in readiness's recovery actions; the start fails only when a role has no candidate left, with
 * every reason.
 *
 * Both layers fail with `RuntimeStartError` (see `RuntimeError`): the store unavailable, a role
 * with no loadable model, no context admitted, or the engine not started.
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as ExecutionStrategy from "effect/ExecutionStrategy"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Scope from "effect/Scope"
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import type { Role } from "../domain/Inference.js"
import * as Path from "node:path"
import * as Admission from "../services/Admission.js"
import * as WorkerAdmissionLive from "../services/admission/WorkerAdmissionLive.js"
import * as Conversations from "../services/Conversations.js"
import { DeviceInventory } from "../services/DeviceInventory.js"
import * as NativeWorker from "../services/NativeWorker.js"
import * as Provider from "../services/Provider.js"
import * as Scheduler from "../services/Scheduler.js"
import * as Store from "../services/Store.js"
import { ggufMediaType } from "../domain/Manifest.js"
import { NoLoadableModel, type RuntimeStartError, toStartError } from "./RuntimeError.js"
import * as StartCheck from "./StartCheck.js"

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

/**
 * The engine side over the given role models: worker, admission, scheduler, conversations and
 * provider, composed from their layers. Fails with Admission's typed error when no context fits,
 * RoleLoadFailed when the engine refused a role's model, or EngineUnavailable when the first
 * engine child never got as far as admission.
 */
const engineLayer = (
  models: { readonly [R in Role]?: RoleSource | undefined },
  options: Partial<RuntimeOptions>,
  childResources: Layer.Layer<NativeWorker.ChildResources> = NativeWorker.ChildResources.layerNoop,
  recoveryActions?: ReadonlyArray<NativeWorker.RecoveryAction>
) => {
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
  const workerConfig: NativeWorker.NativeWorkerConfigShape = {
    ...NativeWorker.NativeWorkerConfig.defaults,
    ...options.worker,
    models: roleModels,
    recoveryActions
  }

  // Shared by reference (each built once per runtime): the inventory, admission and the worker's hooks.
  const inventory = DeviceInventory.layer
  const admission = Admission.layer.pipe(
    Layer.provide(inventory),
    Layer.provide(Admission.AdmissionConfig.layer(admissionConfig))
  )
  const workerAdmission = WorkerAdmissionLive.layer(roles).pipe(Layer.provide(Layer.merge(admission, inventory)))
  const worker = NativeWorker.layer.pipe(
    Layer.provide(Layer.merge(workerAdmission, childResources)),
    Layer.provide(NativeWorker.NativeWorkerConfig.layer(workerConfig))
  )
  // Nothing is built on the worker until its first start passed the check.
  const started = StartCheck.layer(models).pipe(Layer.provide(workerAdmission), Layer.provideMerge(worker))
  const scheduler = Scheduler.layer.pipe(Layer.provide(Scheduler.SchedulerConfig.layer(schedulerConfig)))
  const conversations = Conversations.layer.pipe(
    Layer.provide(conversationsConfig(models.generation, options)),
    Layer.provide(NodeFileSystem.layer)
  )
  const provider = Provider.layer.pipe(Layer.provide(Provider.ProviderConfig.layer({ prefillChunk: workerConfig.prefillChunk })))
  return provider.pipe(
    Layer.provideMerge(conversations),
    Layer.provideMerge(scheduler),
    Layer.provideMerge(Layer.merge(started, admission))
  )
}

/** Conversations' configuration; state files are bound to the generation model's digest. */
const conversationsConfig = (generation: RoleSource | undefined, options: Partial<RuntimeOptions>) =>
  Layer.effect(
    Conversations.ConversationsConfig.ConversationsConfig,
    Effect.gen(function*() {
      return Conversations.ConversationsConfig.make({
        ...options.conversations,
        directory: options.conversationsDirectory,
        maxSaved: options.conversationsMaxSaved,
        // Without a directory nothing is saved, and a model given by path is not read through just to name one.
        modelDigest: generation === undefined || options.conversationsDirectory === undefined
          ? generation?.digest ?? "unsaved"
          : generation.digest ?? (yield* Conversations.digestOfFile(generation.modelPath))
      })
    })
  )

/** The runtime over model files given by path (no store). A model the engine refuses leaves its role with `NoLoadableModel`. */
export const layerWithModels = (
  models: { readonly [R in Role]?: string | undefined },
  options: Partial<RuntimeOptions> = {}
) =>
  // Fresh: the services are this runtime's own, whatever else the graph it is built in holds.
  Layer.fresh(engineLayer(
    {
      generation: models.generation === undefined ? undefined : { modelPath: models.generation },
      decision: models.decision === undefined ? undefined : { modelPath: models.decision }
    },
    options
  )).pipe(
    Layer.mapError((e): RuntimeStartError =>
      e._tag === "RoleLoadFailed"
        ? new NoLoadableModel({ role: e.role, reasons: [`${models[e.role]} did not load: ${e.reason}`] })
        : toStartError(e)
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
          revision: { model: model.model, manifestDigest: model.manifestDigest, revision: model.revision }
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
          const engine = engineLayer(
            { generation: sourceOf(chosen.generation), decision: sourceOf(chosen.decision) },
            { ...options, conversationsDirectory: options.conversationsDirectory ?? Path.join(store.root, "conversations") },
            NativeWorker.ChildResources.layer(leases),
            [...actions]
          )
          return yield* Layer.buildWithScope(engine, scope).pipe(Effect.onError(() => Scope.close(scope, Exit.void)))
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
