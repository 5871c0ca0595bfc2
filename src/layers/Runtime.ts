/**
 * The live runtime: wiring only. Store (with the packaged seed imported and activated) -> the
 * active model of each role, leased for as long as an engine child may map it -> NativeWorker,
 * whose first child's inventory gives Admission its device budget and whose models load at the
 * contexts Admission admits -> Scheduler -> Provider.
 *
 * `layer` is the store-backed runtime (what `nativegen serve` runs); `layerWithModels` loads
 * model files by path (tests, development) with everything else the same.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Stream from "effect/Stream"
import type { Role } from "../domain/Inference.js"
import { EngineUnavailable } from "../domain/EngineError.js"
import * as Path from "node:path"
import * as Admission from "../services/Admission.js"
import * as Conversations from "../services/Conversations.js"
import * as NativeWorker from "../services/NativeWorker.js"
import * as Provider from "../services/Provider.js"
import * as Scheduler from "../services/Scheduler.js"
import * as Store from "../services/Store.js"

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
  readonly conversations: Pick<Conversations.ConversationsConfigShape, "maxHeldConversations" | "maxHeldBytes" | "maxMovedAside">
  readonly admission: Partial<Admission.AdmissionConfigShape>
  readonly worker: Partial<NativeWorker.NativeWorkerConfigShape>
  readonly scheduler: Partial<Scheduler.SchedulerConfigShape>
}

/** A role's model file and, when it comes from the store, its revision and the leases that keep it. */
export interface RoleSource {
  readonly modelPath: string
  /** sha256 of the model file (state files are bound to it); computed from the file when absent. */
  readonly digest?: string | undefined
  readonly revision?: NativeWorker.RoleModel["revision"]
}

/**
 * The engine side: worker, admission, scheduler and provider over the given role models.
 * Fails with Admission's typed error when no context fits, or EngineUnavailable when the first
 * engine child never got as far as admission.
 */
const engine = (
  models: { readonly [R in Role]?: RoleSource | undefined },
  options: Partial<RuntimeOptions>,
  childResources?: NativeWorker.NativeWorkerConfigShape["childResources"]
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
      admission: bridge.hooks,
      childResources
    }
    const worker = yield* NativeWorker.make.pipe(Effect.provideService(NativeWorker.NativeWorkerConfig, workerConfig))
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
    )
    const context = Context.make(NativeWorker.NativeWorker, worker).pipe(Context.add(Admission.Admission, admission))
    const scheduler = yield* Scheduler.make.pipe(
      Effect.provide(context),
      Effect.provideService(Scheduler.SchedulerConfig, schedulerConfig)
    )
    const generation = models.generation
    const conversations = yield* Conversations.make.pipe(
      Effect.provide(context),
      Effect.provideService(Conversations.ConversationsConfig, {
        ...options.conversations,
        directory: options.conversationsDirectory,
        maxSaved: options.conversationsMaxSaved,
        // State files are bound to the model's digest; without a directory nothing is saved, and
        // a model given by path is not read through just to name one.
        modelDigest: generation === undefined || options.conversationsDirectory === undefined
          ? generation?.digest ?? "unsaved"
          : generation.digest ?? (yield* Conversations.digestOfFile(generation.modelPath))
      })
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

/** The runtime over model files given by path (no store). */
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
    )
  )

/** The store-backed runtime: the seed is imported on first use; each role runs its active model. */
export const layer = (options: Partial<RuntimeOptions> = {}) =>
  Layer.scopedContext(
    Effect.gen(function*() {
      const store = yield* Store.Store
      const sources: { [R in Role]?: RoleSource } = {}
      const digests: Array<string> = []
      for (const role of ["generation", "decision"] as const) {
        const active = yield* store.active({ role })
        const gguf = active.artifacts.find((a) => a.mediaType === "application/vnd.gguf") ?? active.artifacts[0]
        if (gguf === undefined) continue
        sources[role] = {
          modelPath: gguf.path,
          digest: gguf.digest.replace(/^sha256:/, ""),
          revision: { manifestDigest: active.manifestDigest, revision: active.revision }
        }
        digests.push(...active.artifacts.map((a) => a.digest))
      }
      // Each child holds reader leases on what it maps, released only after its exit.
      const leases = Effect.forEach(digests, (digest) => store.lease(digest), { discard: true })
      const context = yield* engine(
        sources,
        { ...options, conversationsDirectory: options.conversationsDirectory ?? Path.join(store.root, "conversations") },
        leases
      )
      return Context.add(context, Store.Store, store)
    })
  ).pipe(Layer.provide(Store.layerSeeded), Layer.provide(Store.StoreConfig.layer(options.store ?? {})))
