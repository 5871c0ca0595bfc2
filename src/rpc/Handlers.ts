/**
 * The handlers of `NativegenRpcs`: each Provider call forwarded as it is (streams stay streams,
 * interrupting the request interrupts the Provider call), and the store operations, among them
 * the import with progress.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Mailbox from "effect/Mailbox"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as Path from "node:path"
import { SignedManifest } from "../domain/Manifest.js"
import { streamWithoutFiberMetrics, withoutFiberMetrics } from "../internal/FiberMetrics.js"
import { Provider } from "../services/Provider.js"
import { Store } from "../services/Store.js"
import type * as StoreModule from "../services/Store.js"
import { InvalidManifest, type StoreError, UnsafePath } from "../services/StoreError.js"
import { type ImportEvent, type ImportRequest, NativegenRpcs } from "./Api.js"

const decodeEnvelope = Schema.decodeUnknownEither(Schema.parseJson(SignedManifest))

const activateOptions = (request: { readonly device?: string | undefined; readonly allowRollback?: boolean | undefined }) => {
  const options: { device?: string; allowRollback?: boolean } = {}
  if (request.device !== undefined) options.device = request.device
  if (request.allowRollback !== undefined) options.allowRollback = request.allowRollback
  return options satisfies StoreModule.ActivateOptions
}

/**
 * Import: the manifest is offered for activation first, so its signature, expiry and revision are
 * checked before any byte is copied (a missing artifact is the only refusal that lets the import
 * go on). Then the file is staged under a lease against the manifest's single artifact, and the
 * manifest activated.
 */
const importModel = (
  store: Store["Type"],
  request: ImportRequest,
  emit: (event: ImportEvent) => Effect.Effect<void>
): Effect.Effect<void, StoreError> =>
  Effect.gen(function*() {
    if (!Path.isAbsolute(request.path)) {
      return yield* Effect.fail(new UnsafePath({ path: request.path, found: "a relative path (the server needs an absolute one)" }))
    }
    const options = activateOptions(request)
    const offered = yield* Effect.either(store.activate(request.manifest, options))
    if (Either.isRight(offered)) {
      const activation = offered.right
      yield* emit({ _tag: "Verified", model: activation.model, role: activation.role, revision: activation.revision })
      return yield* emit({ _tag: "Activated", activation })
    }
    if (offered.left._tag !== "ArtifactMissing" && offered.left._tag !== "ArtifactCorrupt") return yield* Effect.fail(offered.left)
    const envelope = decodeEnvelope(request.manifest)
    if (Either.isLeft(envelope)) {
      return yield* Effect.fail(new InvalidManifest({ reason: ParseResult.TreeFormatter.formatErrorSync(envelope.left) }))
    }
    const manifest = envelope.right.manifest
    const [artifact, ...more] = manifest.artifacts
    if (artifact === undefined || more.length > 0) {
      return yield* Effect.fail(
        new InvalidManifest({ reason: `an import stages one file, and the manifest names ${manifest.artifacts.length} artifacts` })
      )
    }
    yield* emit({ _tag: "Verified", model: manifest.name, role: manifest.role, revision: manifest.revision })
    yield* Effect.scoped(Effect.gen(function*() {
      yield* store.stageLeased(request.path, artifact.digest, artifact.size, {
        onProgress: (progress) =>
          emit({
            _tag: "Progress",
            digest: artifact.digest,
            bytes: progress.bytes,
            total: progress.total,
            bytesPerSecond: progress.bytesPerSecond
          })
      })
      yield* emit({ _tag: "Staged", digest: artifact.digest, size: artifact.size })
      const activation = yield* store.activate(request.manifest, options)
      yield* emit({ _tag: "Activated", activation })
    }))
  }).pipe(Effect.withSpan("Rpc.StoreImport", { attributes: { path: request.path } }))

/** `importModel` as a stream of its events; ending the stream interrupts the import. */
const importStream = (store: Store["Type"], request: ImportRequest): Stream.Stream<ImportEvent, StoreError> =>
  Stream.unwrapScoped(Effect.gen(function*() {
    const mailbox = yield* Mailbox.make<ImportEvent, StoreError>()
    yield* importModel(store, request, (event) => Effect.asVoid(mailbox.offer(event))).pipe(
      Mailbox.into(mailbox),
      Effect.forkScoped
    )
    return Mailbox.toStream(mailbox)
  }))

/** The handlers, over the Provider and the Store in context. */
export const layer = NativegenRpcs.toLayer(Effect.gen(function*() {
  const provider = yield* Provider
  const store = yield* Store
  return {
    // Requests run without Effect's fiber metrics (the server starts their fibers with the default flags).
    Generate: (request) => streamWithoutFiberMetrics(provider.generate(request)),
    Decide: (request) => withoutFiberMetrics(provider.decide(request)),
    Prepare: (request) => withoutFiberMetrics(provider.prepare(request)),
    Count: (request) => withoutFiberMetrics(provider.count(request)),
    Tokenize: (request) => withoutFiberMetrics(provider.tokenize(request)),
    Readiness: () => provider.readiness,
    WatchReadiness: () => provider.readinessChanges,
    StoreList: () => store.list,
    StoreImport: (request) => importStream(store, request),
    StoreVerify: ({ digest }) =>
      Effect.map(store.verify(digest), (blob) => ({ digest: blob.digest, path: blob.path, size: blob.size })),
    StoreActivate: (request) => store.activate(request.manifest, activateOptions(request)),
    StoreDeactivate: ({ device, model }) => store.deactivate(model, device === undefined ? {} : { device }),
    StoreReap: ({ graceMillis }) => store.reap(graceMillis === undefined ? {} : { grace: Duration.millis(graceMillis) })
  }
}))
