/**
 * The model store: which model bytes are trusted and current. Content-addressed blobs (staged
 * with size and digest enforced, published durably), ed25519-signed manifests, an append-only
 * activation journal under an exclusive cross-process lock, reference-counted reader leases that
 * survive as files for other processes to see, reaping, and the packaged seed.
 *
 * Layout of a store root:
 * `store.lock`, `journal.jsonl`, `blobs/sha256/<2 hex>/<64 hex>`, `manifests/sha256/<64 hex>.json`,
 * `leases/<64 hex>/<owner>.<random>.lease`, `staging/`, `quarantine/`, `recovered/`.
 */
import * as Config from "effect/Config"
import type { ConfigError } from "effect/ConfigError"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as RcMap from "effect/RcMap"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as Crypto from "node:crypto"
import * as NodeFs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Digest from "../domain/Digest.js"
import * as GgufHeader from "../domain/GgufHeader.js"
import { ggufMediaType, type Manifest, type Role, type SignedManifest } from "../domain/Manifest.js"
import type {
  Activation,
  ActiveArtifact,
  ActiveModel,
  ListedBlob,
  Listing,
  ModelRevision,
  PassedOver,
  ReapReport
} from "../domain/StoreResults.js"
import {
  ArtifactCorrupt,
  ArtifactMissing,
  type BadSignature,
  type DigestMismatch,
  type InvalidDigest,
  type InvalidKey,
  InvalidManifest,
  InvalidModelFile,
  type InvalidSize,
  type JournalCorrupt,
  type KeyNotAllowed,
  ManifestExpired,
  type ManifestMissing,
  type ManifestTooLarge,
  type ManifestUnsigned,
  NotActive,
  RollbackRefused,
  type SizeExceeded,
  type SizeMismatch,
  StoreIoError,
  type UnknownKey,
  type UnsafePath
} from "./StoreError.js"
import * as Blobs from "./store/Blobs.js"
import * as Dir from "./store/Dir.js"
import * as Fs from "./store/Fs.js"
import * as Journal from "./store/Journal.js"
import * as Leases from "./store/Leases.js"
import * as Lock from "./store/Lock.js"
import * as Manifests from "./store/Manifests.js"
import * as Owner from "./store/Owner.js"
import * as SafePath from "./store/SafePath.js"
import * as Seed from "./store/Seed.js"
import * as Signing from "./store/Signing.js"

export type { Progress, StageSource, VerifiedBlob } from "./store/Blobs.js"
/** The store's results: the domain Schemas' types (src/domain/StoreResults.ts). */
export type { Activation, ActiveArtifact, ActiveModel, ListedBlob, Listing, ModelRevision, PassedOver, ReapReport }
export type { GeneratedKey } from "./store/Signing.js"
export type { SeedSource } from "./store/Seed.js"

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

/** Store configuration. */
export interface StoreConfigShape {
  /** The store root directory (created 0700 if absent). Default `$XDG_DATA_HOME/nativegen/store` (or `~/.local/share/...`). */
  readonly root: string
  /** PEM (SPKI) ed25519 public keys trusted to sign manifests. Default: none besides the seed key. */
  readonly trustedKeys: ReadonlyArray<string>
  /** Whether the seed's own public key (`<seed dir>/seed.pub`) is trusted. Default true. */
  readonly trustSeedKey: boolean
  /** Largest signed manifest accepted, checked before parsing. Default 65536 bytes. */
  readonly maxManifestBytes: number
  /** Device used when an operation names none. Default `cpu`. */
  readonly device: string
  /** Unreferenced, unleased blobs younger than this are not reaped. Default 10 minutes. */
  readonly reapGrace: Duration.Duration
  /** The seed that `importSeed` imports. Default: the packaged seed. */
  readonly seed: Seed.SeedSource
}

const defaultRoot = () =>
  Path.join(process.env.XDG_DATA_HOME ?? Path.join(Os.homedir(), ".local", "share"), "nativegen", "store")

export class StoreConfig extends Context.Tag("nativegen/StoreConfig")<StoreConfig, StoreConfigShape>() {
  /** The defaults (computed: the root depends on the environment). */
  static readonly defaults = (): StoreConfigShape => ({
    root: defaultRoot(),
    trustedKeys: [],
    trustSeedKey: true,
    maxManifestBytes: 65536,
    device: "cpu",
    reapGrace: Duration.minutes(10),
    seed: Seed.packaged
  })

  static readonly layer = (options: Partial<StoreConfigShape> = {}): Layer.Layer<StoreConfig> =>
    Layer.sync(StoreConfig, () => ({ ...StoreConfig.defaults(), ...options }))

  /** Reads `root`, `trustedKeys` (PEM texts), `maxManifestBytes`, `device`, `reapGrace` from the Config provider. */
  static readonly config = Config.all({
    root: Config.string("root").pipe(
      Config.withDefault(defaultRoot()),
      Config.withDescription("Store root directory")
    ),
    trustedKeys: Config.array(Config.string(), "trustedKeys").pipe(
      Config.withDefault([]),
      Config.withDescription("PEM ed25519 public keys trusted to sign manifests")
    ),
    maxManifestBytes: Config.integer("maxManifestBytes").pipe(
      Config.withDefault(65536),
      Config.withDescription("Largest signed manifest accepted, checked before parsing")
    ),
    device: Config.string("device").pipe(Config.withDefault("cpu"), Config.withDescription("Default device name")),
    reapGrace: Config.duration("reapGrace").pipe(
      Config.withDefault(Duration.minutes(10)),
      Config.withDescription("Minimum age of an unreferenced blob before reaping")
    )
  })

  static readonly layerConfig = (options: Partial<StoreConfigShape> = {}): Layer.Layer<StoreConfig, ConfigError> =>
    Layer.effect(
      StoreConfig,
      Effect.map(StoreConfig.config, (config) => ({ ...StoreConfig.defaults(), ...config, ...options }))
    )

  /** `NATIVEGEN_STORE_ROOT`, `NATIVEGEN_STORE_TRUSTED_KEYS`, ... */
  static readonly layerFromEnv = (options: Partial<StoreConfigShape> = {}): Layer.Layer<StoreConfig, ConfigError> =>
    StoreConfig.layerConfig(options).pipe(
      Layer.provide(Layer.setConfigProvider(
        ConfigProvider.fromEnv().pipe(ConfigProvider.constantCase, ConfigProvider.nested("NATIVEGEN_STORE"))
      ))
    )
}

// ---------------------------------------------------------------------------------------------
// The service
// ---------------------------------------------------------------------------------------------

/** Selects an active manifest by model name or by role. */
export type Selector = { readonly model: string } | { readonly role: Role }

export interface StageOptions {
  /** Called at most every 100 ms while copying, and once at the end. */
  readonly onProgress?: (progress: Blobs.Progress) => Effect.Effect<void>
}

export interface ActivateOptions {
  /** Device to activate on. Default: the configured device. */
  readonly device?: string
  /** Permit a revision not newer than the active one. Default false. */
  readonly allowRollback?: boolean
}

/**
 * What a role may run, one entry per manifest in the order to try: its activations in the journal
 * from the newest (each usable, or passed over with the reason), then the packaged seed's model
 * for the role when no activation names that manifest (staged, not activated: `journalLine` is
 * undefined).
 */
export type Candidate = Either.Either<ModelRevision & { readonly journalLine: number | undefined }, PassedOver>

/** A held reader lease. */
export interface Lease {
  readonly digest: Digest.Digest
  readonly path: string
  readonly size: number
}

export interface SeedReport {
  /** Seed models activated now or already active. */
  readonly models: ReadonlyArray<Activation>
  /**
   * Seed models staged (their artifacts verified in the store) but not activated: their role has
   * an activation of another model, or a newer revision of the seed model is active.
   */
  readonly staged: ReadonlyArray<{
    readonly model: string
    readonly role: Role
    readonly revision: number
    readonly manifestDigest: Digest.Digest
    readonly reason: string
  }>
}

export type StageError =
  | InvalidDigest
  | InvalidSize
  | DigestMismatch
  | SizeExceeded
  | SizeMismatch
  | UnsafePath
  | ArtifactCorrupt
  | StoreIoError

export type VerifyError = InvalidDigest | ArtifactMissing | ArtifactCorrupt | UnsafePath | StoreIoError

export type ActivateError =
  | ManifestTooLarge
  | ManifestUnsigned
  | UnknownKey
  | KeyNotAllowed
  | BadSignature
  | InvalidManifest
  | InvalidModelFile
  | ManifestExpired
  | RollbackRefused
  | ArtifactMissing
  | ArtifactCorrupt
  | JournalCorrupt
  | UnsafePath
  | StoreIoError

/** Why one activation cannot be used (it is passed over); anything else is a fault of the store. */
export type UnusableError =
  | ManifestMissing
  | ManifestTooLarge
  | ManifestUnsigned
  | UnknownKey
  | KeyNotAllowed
  | BadSignature
  | InvalidManifest
  | ArtifactMissing

/** A store that cannot be read at all. */
export type StoreFault = JournalCorrupt | UnsafePath | StoreIoError

/** `NotActive` when nothing was activated; the newest activation's refusal when none is usable. */
export type ActiveError = NotActive | UnusableError | StoreFault

export type LeaseError = InvalidDigest | ArtifactMissing | ArtifactCorrupt | UnsafePath | StoreIoError

export type ReapError = JournalCorrupt | ManifestMissing | ManifestTooLarge | InvalidManifest | UnsafePath | StoreIoError

export type SeedError = ActivateError | StageError | InvalidKey | ManifestMissing

export class Store extends Context.Tag("nativegen/Store")<Store, {
  /** The store root (real path). */
  readonly root: string
  /** The default device. */
  readonly device: string
  /**
   * Copies a file (path) or byte stream into the store under `expectedDigest`, enforcing
   * `declaredSize` while copying; returns the published blob's path. Idempotent when present
   * (the source is then not read).
   */
  readonly stage: <E = never>(
    source: Blobs.StageSource<E>,
    expectedDigest: string,
    declaredSize: number,
    options?: StageOptions
  ) => Effect.Effect<string, StageError | E>
  /**
   * `stage`, holding a lease (taken before publishing) for the scope: no reap can collect the
   * blob between staging and a later `activate`.
   */
  readonly stageLeased: <E = never>(
    source: Blobs.StageSource<E>,
    expectedDigest: string,
    declaredSize: number,
    options?: StageOptions
  ) => Effect.Effect<Lease, StageError | E, Scope.Scope>
  /** Re-hashes a published blob; a corrupt one is quarantined (`ArtifactCorrupt`). */
  readonly verify: (digest: string) => Effect.Effect<Blobs.VerifiedBlob, VerifyError>
  /**
   * Verifies a signed manifest (an object, or its JSON text or bytes, size-checked before
   * parsing) and every artifact it names, then journals it as active for (model, device).
   */
  readonly activate: (
    signed: SignedManifest | string | Uint8Array,
    options?: ActivateOptions
  ) => Effect.Effect<Activation, ActivateError>
  /**
   * The active manifest for a model or role on a device (default device when omitted): the newest
   * activation that is usable under today's trust. Newer ones that are not are passed over.
   */
  readonly active: (selector: Selector, device?: string) => Effect.Effect<ActiveModel, ActiveError>
  /** What a role may run, in the order to try (see `Candidate`). */
  readonly candidates: (role: Role, device?: string) => Effect.Effect<ReadonlyArray<Candidate>, StoreFault>
  /** The active manifests (per model, the newest usable), the activations passed over, every published blob. */
  readonly list: Effect.Effect<Listing, ReapError>
  /**
   * A scoped reader lease: while held (by any process), reaping keeps the blob. The blob is
   * verified on first lease in this process (and again whenever its identity changed).
   * Reference counted within the process.
   */
  readonly lease: (digest: string) => Effect.Effect<Lease, LeaseError, Scope.Scope>
  /** Removes blobs that no active manifest names, no live lease holds, and that are older than the grace. */
  readonly reap: (options?: { readonly grace?: Duration.DurationInput }) => Effect.Effect<ReapReport, ReapError>
  /**
   * Imports the configured seed: every seed artifact is verified (regenerated and staged when
   * absent or corrupt). A seed manifest is then activated only when its role has no activation of
   * any other model (on the default device) and no newer revision of it is active; otherwise it
   * stays staged (see `SeedReport.staged`), available to `candidates` and to an explicit
   * `activate`. Idempotent: an active seed manifest is reported `alreadyActive` and nothing is
   * journaled.
   */
  readonly importSeed: Effect.Effect<SeedReport, SeedError>
}>() {}

const isDevice = Schema.is(Journal.DeviceName)

const checkDevice = (device: string) =>
  isDevice(device) ? Effect.succeed(device) : Effect.fail(new InvalidManifest({ reason: `invalid device name ${JSON.stringify(device)}` }))

/** Builds the store from its configuration. Fails on an unsafe root or a corrupt journal. */
export const make: Effect.Effect<
  Store["Type"],
  UnsafePath | StoreIoError | InvalidKey | JournalCorrupt,
  StoreConfig | Scope.Scope
> = Effect.gen(function*() {
  const config = yield* StoreConfig
  if (!isDevice(config.device)) return yield* Effect.dieMessage(`invalid default device ${JSON.stringify(config.device)}`)
  const root = yield* Fs.orStoreError(SafePath.prepareRoot(config.root))
  const lock = yield* Fs.orStoreError(Lock.make(root))
  const withLock = <A, E, R>(self: Effect.Effect<A, E, R>) => Fs.orStoreError(lock.withLock(self))

  // The seed's key may sign only the seed's own models; a key the configuration names is trusted
  // for everything (even when it is the seed's).
  const trusted = new Map<string, Signing.TrustedKey>()
  if (config.trustSeedKey) {
    const seedKey = yield* Effect.either(Seed.scopedKey(config.seed.dir, config.maxManifestBytes))
    if (Either.isRight(seedKey)) trusted.set(seedKey.right.keyId, seedKey.right)
    else yield* Effect.logWarning("store: no seed key").pipe(Effect.annotateLogs({ service: "Store", reason: seedKey.left.message }))
  }
  for (const [i, pem] of config.trustedKeys.entries()) {
    const key = yield* Either.match(Signing.publicKeyFromPem(pem, `trustedKeys[${i}]`), {
      onLeft: Effect.fail,
      onRight: Effect.succeed
    })
    trusted.set(key.keyId, key)
  }

  const journal = yield* Journal.make(root)
  const blobs = Blobs.make(root, lock)
  const leases = Leases.make(root)
  const manifests = Manifests.make(root, config.maxManifestBytes)

  yield* withLock(journal.read)
  yield* blobs.cleanStaging

  // --- stage / verify ---------------------------------------------------------------------

  const stage = <E = never>(
    source: Blobs.StageSource<E>,
    expectedDigest: string,
    declaredSize: number,
    options?: StageOptions
  ): Effect.Effect<string, StageError | E> =>
    Blobs.validateDigest(expectedDigest).pipe(
      Effect.flatMap((digest) => blobs.stage(source, digest, declaredSize, options?.onProgress)),
      Effect.withSpan("Store.stage", { attributes: { digest: expectedDigest, size: declaredSize } })
    )

  /** A lease file for `digest`, present or not, held for the scope. */
  const pin = (digest: Digest.Digest) =>
    Effect.acquireRelease(
      withLock(leases.create(digest)),
      (file) =>
        withLock(leases.remove(file)).pipe(
          Effect.catchAll((e) =>
            Effect.logWarning("store: could not remove lease file").pipe(
              Effect.annotateLogs({ service: "Store", path: file.path, error: e.message })
            )
          )
        )
    )

  const stageLeased = <E = never>(
    source: Blobs.StageSource<E>,
    expectedDigest: string,
    declaredSize: number,
    options?: StageOptions
  ): Effect.Effect<Lease, StageError | E, Scope.Scope> =>
    Effect.gen(function*() {
      const digest = yield* Blobs.validateDigest(expectedDigest)
      yield* pin(digest)
      const path = yield* blobs.stage(source, digest, declaredSize, options?.onProgress)
      return { digest, path, size: declaredSize } satisfies Lease
    }).pipe(Effect.withSpan("Store.stageLeased", { attributes: { digest: expectedDigest, size: declaredSize } }))

  const verify = Effect.fn("Store.verify")(function*(digest: string) {
    return yield* blobs.verify(yield* Blobs.validateDigest(digest))
  })

  // --- activation -------------------------------------------------------------------------

  const readSigned = (signed: SignedManifest | string | Uint8Array) => {
    const bytes = typeof signed === "string"
      ? Buffer.from(signed, "utf8")
      : signed instanceof Uint8Array
      ? signed
      : Buffer.from(Signing.envelopeText(signed), "utf8")
    return Signing.readEnvelope(bytes, trusted, config.maxManifestBytes)
  }

  /** Refuses a revision not newer than the active one of the model (unless allowed). */
  const checkRevision = (state: Journal.State, verified: Signing.Verified, device: string, allowRollback: boolean) => {
    const current = state.newest.get(Journal.key(verified.manifest.name, device))
    if (current === undefined) return Effect.void
    if (current.entry.revision >= verified.manifest.revision && !allowRollback) {
      return Effect.fail(
        new RollbackRefused({
          model: verified.manifest.name,
          device,
          active: current.entry.revision,
          offered: verified.manifest.revision
        })
      )
    }
    return Effect.void
  }

  /** Reads a GGUF artifact's header through a descriptor checked to be the verified blob. */
  const checkModelFile = (blob: Blobs.VerifiedBlob) =>
    Effect.scoped(Effect.gen(function*() {
      const file = yield* SafePath.openRead(root, Blobs.segmentsOf(blob.digest), Digest.hex(blob.digest))
      if (file.stat.ino !== blob.ino || file.stat.dev !== blob.dev) return yield* Effect.fail(new ArtifactMissing({ digest: blob.digest }))
      const header = yield* Effect.try({
        try: () =>
          GgufHeader.read((position, length) => {
            const buffer = Buffer.allocUnsafe(length)
            return buffer.subarray(0, NodeFs.readSync(file.fd, buffer, 0, length, position))
          }, Number(file.stat.size)),
        catch: (cause) => new StoreIoError({ operation: "read model header", path: file.path, cause })
      })
      if (Either.isLeft(header)) {
        return yield* Effect.fail(new InvalidModelFile({ digest: blob.digest, reason: header.left.reason, offset: header.left.offset }))
      }
      return header.right
    })).pipe(Fs.orStoreError)

  /**
   * The same manifest (same digest) offered again under a key trusted today: when the stored
   * envelope no longer verifies (its signer was removed, or the seed was re-signed), the offered
   * one replaces it, so the activation is usable again. Call under the lock.
   */
  const refreshEnvelope = (verified: Signing.Verified) =>
    Effect.flatMap(Effect.either(manifests.readVerified(verified.digest, trusted)), (stored) =>
      Either.isRight(stored)
        ? Effect.void
        : Effect.zipRight(
          manifests.write(verified.digest, verified.envelope),
          Effect.logInfo("store: stored manifest re-signed").pipe(
            Effect.annotateLogs({ service: "Store", manifest: verified.digest, keyId: verified.keyId, was: stored.left.message })
          )
        ))

  const activation = (verified: Signing.Verified, device: string, alreadyActive: boolean): Activation => ({
    model: verified.manifest.name,
    role: verified.manifest.role,
    device,
    revision: verified.manifest.revision,
    manifestDigest: verified.digest,
    keyId: verified.keyId,
    alreadyActive
  })

  /**
   * Activates a verified manifest: the artifacts are verified (a GGUF one's header checked), then,
   * under the lock, the revision rule is applied and the journal appended. `holdBack` (checked
   * under the same lock, after "already active") may keep it from being activated, with a reason.
   */
  const activateVerified = (
    verified: Signing.Verified,
    device: string,
    allowRollback: boolean,
    holdBack: (state: Journal.State) => string | undefined = () => undefined
  ) =>
    Effect.gen(function*() {
      const manifest = verified.manifest
      if (manifest.expiresAt !== undefined) {
        const now = yield* Clock.currentTimeMillis
        if (manifest.expiresAt.getTime() <= now) {
          return yield* Effect.fail(
            new ManifestExpired({
              model: manifest.name,
              revision: manifest.revision,
              expiresAt: manifest.expiresAt.toISOString(),
              now: new Date(now).toISOString()
            })
          )
        }
      }
      type Outcome = Either.Either<Activation, string>
      /** Already active, held back, or none of these (then the rollback rule has been applied). */
      const settled = (state: Journal.State) =>
        Effect.gen(function*() {
          const current = state.newest.get(Journal.key(manifest.name, device))
          if (current !== undefined && current.entry.manifest === verified.digest) {
            yield* refreshEnvelope(verified)
            return Option.some<Outcome>(Either.right(activation(verified, device, true)))
          }
          const reason = holdBack(state)
          if (reason !== undefined) return Option.some<Outcome>(Either.left(reason))
          yield* checkRevision(state, verified, device, allowRollback)
          return Option.none<Outcome>()
        })
      const early = yield* withLock(Effect.flatMap(journal.read, settled))
      if (Option.isSome(early)) return early.value
      const checked: Array<Blobs.VerifiedBlob> = []
      for (const artifact of manifest.artifacts) {
        const blob = yield* blobs.verify(artifact.digest, { trustIdentity: true })
        if (blob.size !== artifact.size) {
          return yield* Effect.fail(
            new InvalidManifest({ reason: `artifact ${artifact.digest} is ${blob.size} bytes, the manifest says ${artifact.size}` })
          )
        }
        if (artifact.mediaType === ggufMediaType) yield* checkModelFile(blob)
        checked.push(blob)
      }
      return yield* withLock(Effect.gen(function*() {
        const state = yield* journal.read
        const late = yield* settled(state)
        if (Option.isSome(late)) return late.value
        for (const blob of checked) {
          const now = yield* blobs.statOf(blob.digest)
          if (Option.isNone(now) || now.value.ino !== blob.ino || now.value.dev !== blob.dev) {
            return yield* Effect.fail(new ArtifactMissing({ digest: blob.digest }))
          }
        }
        yield* manifests.write(verified.digest, verified.envelope)
        yield* journal.append({
          model: manifest.name,
          role: manifest.role,
          device,
          manifest: verified.digest,
          revision: manifest.revision
        })
        yield* Effect.logInfo("store: activated").pipe(
          Effect.annotateLogs({ service: "Store", model: manifest.name, device, revision: manifest.revision, manifest: verified.digest })
        )
        const activated: Outcome = Either.right(activation(verified, device, false))
        return activated
      }))
    })

  const activate = Effect.fn("Store.activate")(function*(
    signed: SignedManifest | string | Uint8Array,
    options?: ActivateOptions
  ) {
    const device = yield* checkDevice(options?.device ?? config.device)
    const verified = yield* readSigned(signed)
    const result = yield* activateVerified(verified, device, options?.allowRollback === true)
    return yield* Either.match(result, {
      onLeft: (reason) => Effect.die(new Error(`store bug: an activation without a guard was held back (${reason})`)),
      onRight: Effect.succeed
    })
  })

  // --- reading what is active -------------------------------------------------------------

  type Indexed = Journal.Indexed

  /** A verified manifest with its artifacts found in the store. */
  const describeVerified = (verified: Signing.Verified, device: string) =>
    Effect.gen(function*() {
      const artifacts: Array<ActiveArtifact> = []
      for (const artifact of verified.manifest.artifacts) {
        const st = yield* blobs.statOf(artifact.digest)
        if (Option.isNone(st) || !st.value.isFile()) return yield* Effect.fail(new ArtifactMissing({ digest: artifact.digest }))
        artifacts.push({ digest: artifact.digest, size: artifact.size, mediaType: artifact.mediaType, path: blobs.pathOf(artifact.digest) })
      }
      return {
        model: verified.manifest.name,
        role: verified.manifest.role,
        device,
        revision: verified.manifest.revision,
        manifestDigest: verified.digest,
        keyId: verified.keyId,
        manifest: verified.manifest,
        artifacts
      } satisfies ModelRevision
    })

  /** Verifies a stored manifest under today's trust and finds its artifacts. */
  const describeManifest = (digest: Digest.Digest, device: string) =>
    Effect.flatMap(manifests.readVerified(digest, trusted), (verified) => describeVerified(verified, device))

  const unusableTags: ReadonlySet<string> = new Set<UnusableError["_tag"]>([
    "ManifestMissing",
    "ManifestTooLarge",
    "ManifestUnsigned",
    "UnknownKey",
    "KeyNotAllowed",
    "BadSignature",
    "InvalidManifest",
    "ArtifactMissing"
  ])
  const isUnusable = (e: { readonly _tag: string }): e is UnusableError => unusableTags.has(e._tag)

  /** An activation described, or the refusal that makes it unusable; a fault of the store fails. */
  const tryDescribe = (indexed: Indexed): Effect.Effect<Either.Either<ActiveModel, UnusableError>, StoreFault> =>
    describeManifest(indexed.entry.manifest, indexed.entry.device).pipe(
      Effect.map((model): Either.Either<ActiveModel, UnusableError> =>
        Either.right({ ...model, activatedAt: indexed.entry.at, journalLine: indexed.line })
      ),
      Effect.catchIf(isUnusable, (e) => Effect.succeed(Either.left(e)))
    )

  const passedOver = (indexed: Indexed, error: UnusableError): PassedOver => ({
    model: indexed.entry.model,
    role: indexed.entry.role,
    device: indexed.entry.device,
    revision: indexed.entry.revision,
    manifestDigest: indexed.entry.manifest,
    journalLine: indexed.line,
    error: error._tag,
    reason: error.message
  })

  /** The journal's activations for a selector on a device, newest first, each manifest once. */
  const activationsOf = (state: Journal.State, selector: Selector, device: string): Array<Indexed> => {
    const seen = new Set<string>()
    const found: Array<Indexed> = []
    for (let i = state.entries.length - 1; i >= 0; i--) {
      const indexed = state.entries[i]!
      const { entry } = indexed
      if (entry.device !== device || seen.has(entry.manifest)) continue
      if ("model" in selector ? entry.model !== selector.model : entry.role !== selector.role) continue
      seen.add(entry.manifest)
      found.push(indexed)
    }
    return found
  }

  /** The newest usable activation for a selector, and the newer ones passed over on the way. */
  const firstUsable = (state: Journal.State, selector: Selector, device: string) =>
    Effect.gen(function*() {
      const skipped: Array<{ readonly indexed: Indexed; readonly error: UnusableError }> = []
      for (const indexed of activationsOf(state, selector, device)) {
        const described = yield* tryDescribe(indexed)
        if (Either.isRight(described)) return { found: Option.some(described.right), skipped }
        skipped.push({ indexed, error: described.left })
      }
      return { found: Option.none<ActiveModel>(), skipped }
    })

  const warnPassedOver = (skipped: ReadonlyArray<{ readonly indexed: Indexed; readonly error: UnusableError }>) =>
    Effect.forEach(skipped, ({ error, indexed }) =>
      Effect.logWarning("store: activation passed over").pipe(
        Effect.annotateLogs({
          service: "Store",
          model: indexed.entry.model,
          revision: indexed.entry.revision,
          manifest: indexed.entry.manifest,
          journalLine: indexed.line,
          reason: error.message
        })
      ), { discard: true })

  const active = Effect.fn("Store.active")(function*(selector: Selector, device?: string) {
    const dev = device ?? config.device
    const state = yield* withLock(journal.read)
    const { found, skipped } = yield* firstUsable(state, selector, dev)
    yield* warnPassedOver(skipped)
    if (Option.isSome(found)) return found.value
    const newest = skipped[0]
    if (newest !== undefined) return yield* Effect.fail(newest.error)
    return yield* Effect.fail(
      new NotActive({ selector: "model" in selector ? `model:${selector.model}` : `role:${selector.role}`, device: dev })
    )
  })

  /**
   * The seed's manifests, each verified under today's trust (its key, scoped to its models); none
   * when the seed cannot be read (it is a last resort, not a requirement).
   */
  const seedManifests = Effect.flatMap(Seed.manifestFiles(config.seed.dir), (files) =>
    Effect.forEach(files, (file) => Effect.map(Seed.readManifest(file, config.maxManifestBytes), readSigned))).pipe(
      Effect.catchAll((e) =>
        Effect.as(
          Effect.logWarning("store: the seed cannot be read").pipe(Effect.annotateLogs({ service: "Store", reason: e.message })),
          []
        )
      )
    )

  const candidates = Effect.fn("Store.candidates")(function*(role: Role, device?: string) {
    const dev = device ?? config.device
    const state = yield* withLock(journal.read)
    const result: Array<Candidate> = []
    for (const indexed of activationsOf(state, { role }, dev)) {
      const described = yield* tryDescribe(indexed)
      result.push(Either.isRight(described) ? Either.right(described.right) : Either.left(passedOver(indexed, described.left)))
    }
    // A seed manifest whose activation was passed over (the seed was re-signed) is a candidate again.
    const named = new Set(result.flatMap((c) => Either.isRight(c) ? [c.right.manifestDigest] : []))
    for (const seed of yield* seedManifests) {
      if (Either.isLeft(seed)) continue
      const { digest, manifest } = seed.right
      if (manifest.role !== role || named.has(digest)) continue
      // The seed's artifacts are in the store once importSeed has run; without them it is no candidate.
      const described = yield* describeVerified(seed.right, dev).pipe(
        Effect.map(Option.some),
        Effect.catchTag("ArtifactMissing", () => Effect.succeed(Option.none()))
      )
      if (Option.isSome(described)) result.push(Either.right({ ...described.value, journalLine: undefined }))
    }
    return result
  })

  // --- leases -----------------------------------------------------------------------------

  const leaseMap = yield* RcMap.make({
    lookup: (digest: Digest.Digest) =>
      Effect.gen(function*() {
        const present = yield* blobs.statOf(digest)
        if (Option.isNone(present)) return yield* Effect.fail(new ArtifactMissing({ digest }))
        yield* pin(digest)
        const blob = yield* blobs.verify(digest, { trustIdentity: true })
        return { digest, path: blob.path, size: blob.size } satisfies Lease
      })
  })

  const lease = (digest: string) =>
    Effect.flatMap(Blobs.validateDigest(digest), (d) =>
      RcMap.get(leaseMap, d).pipe(Effect.tapError(() => RcMap.invalidate(leaseMap, d)))).pipe(
        Effect.withSpan("Store.lease", { attributes: { digest } })
      )

  // --- reaping ----------------------------------------------------------------------------

  /** Per (model, device), the newest usable activation, and the newer ones passed over. */
  const activePerModel = (state: Journal.State) =>
    Effect.gen(function*() {
      const activeModels: Array<ActiveModel> = []
      const skipped: Array<PassedOver> = []
      for (const newest of state.newest.values()) {
        const { entry } = newest
        const { found, skipped: newer } = yield* firstUsable(state, { model: entry.model }, entry.device)
        if (Option.isSome(found)) activeModels.push(found.value)
        skipped.push(...newer.map(({ error, indexed }) => passedOver(indexed, error)))
      }
      return {
        active: activeModels.sort((a, b) => a.journalLine - b.journalLine),
        passedOver: skipped.sort((a, b) => a.journalLine - b.journalLine)
      }
    })

  /**
   * The artifacts reaping keeps: those of each model's newest activation, read without checking
   * signatures (a key removed from the configuration never makes them look unreferenced), and
   * those of each model's newest usable activation (what runs when the newest is passed over).
   */
  const referencedBy = (state: Journal.State) =>
    Effect.gen(function*() {
      const referenced = new Set<string>()
      for (const indexed of state.newest.values()) {
        const manifest = yield* manifests.readReferenced(indexed.entry.manifest)
        for (const artifact of manifest.artifacts) referenced.add(artifact.digest)
      }
      const models = yield* activePerModel(state)
      for (const model of models.active) for (const artifact of model.artifacts) referenced.add(artifact.digest)
      return { referenced, models }
    })

  const reap = Effect.fn("Store.reap")(function*(options?: { readonly grace?: Duration.DurationInput }) {
    const grace = Duration.toMillis(options?.grace === undefined ? config.reapGrace : Duration.decode(options.grace))
    const now = yield* Clock.currentTimeMillis
    return yield* withLock(Effect.gen(function*() {
      const state = yield* journal.read
      const { referenced } = yield* referencedBy(state)
      const scan = yield* leases.scan
      const removed: Array<Digest.Digest> = []
      const kept: Array<Digest.Digest> = []
      let freedBytes = 0
      for (const { digest, stat } of yield* blobs.list) {
        if (referenced.has(digest)) continue
        const young = grace > 0 && now - Number(stat.mtimeMs) < grace
        if (scan.held.has(Digest.hex(digest)) || young) {
          kept.push(digest)
          continue
        }
        if (yield* blobs.remove(digest, stat.ino)) {
          removed.push(digest)
          freedBytes += Number(stat.size)
        }
      }
      const staleStaging = yield* blobs.cleanStaging
      if (removed.length > 0) {
        yield* Effect.logInfo("store: reaped").pipe(Effect.annotateLogs({ service: "Store", removed: removed.length, freedBytes }))
      }
      return { removed, freedBytes, kept, staleLeases: scan.staleRemoved, staleStaging } satisfies ReapReport
    }))
  })

  // --- listing ----------------------------------------------------------------------------

  const list = Effect.gen(function*() {
    const { models, referenced, scan } = yield* withLock(Effect.gen(function*() {
      const { models, referenced } = yield* referencedBy(yield* journal.read)
      return { models, referenced, scan: yield* leases.scan }
    }))
    const all = yield* blobs.list
    return {
      active: models.active,
      passedOver: models.passedOver,
      blobs: all.map(({ digest, stat }) => ({
        digest,
        size: Number(stat.size),
        referenced: referenced.has(digest),
        leased: scan.held.has(Digest.hex(digest))
      }))
    } satisfies Listing
  }).pipe(Effect.withSpan("Store.list"))

  // --- seed -------------------------------------------------------------------------------

  const owner = Owner.format(Owner.self())

  /**
   * Holds a lease on a seed artifact for the scope. A present blob is verified by the lease; an
   * absent or corrupt one (quarantined by that verification) is regenerated and staged.
   */
  const importSeedArtifact = (digest: Digest.Digest, size: number, model: string) =>
    Effect.gen(function*() {
      const present = yield* blobs.statOf(digest)
      if (Option.isSome(present) && present.value.isFile() && Number(present.value.size) === size) {
        const leased = yield* lease(digest).pipe(
          Effect.as(true),
          Effect.catchTags({ ArtifactCorrupt: () => Effect.succeed(false), ArtifactMissing: () => Effect.succeed(false) })
        )
        if (leased) return
      }
      // Written and removed through the opened staging directory, never by a path that a swapped
      // directory could redirect outside the store.
      const staging = yield* Fs.orStoreError(Dir.open(root, [Blobs.stagingDir], true))
      const name = `${owner}.${Crypto.randomBytes(6).toString("hex")}.seed`
      const temp = Dir.at(staging, name)
      yield* Effect.acquireUseRelease(
        Effect.as(config.seed.materialize(model, temp), temp),
        () => stageLeased(temp, digest, size),
        () => Effect.ignore(Dir.unlink(staging, name))
      )
    })

  /**
   * Why a seed manifest stays staged: its role has (on the default device) an activation of
   * another model: the user's choice, which a package upgrade must not replace.
   */
  const seedHeldBack = (manifest: Manifest) => (state: Journal.State): string | undefined => {
    for (let i = state.entries.length - 1; i >= 0; i--) {
      const { entry, line } = state.entries[i]!
      if (entry.role === manifest.role && entry.device === config.device && entry.model !== manifest.name) {
        return `${manifest.role} has an activation of ${entry.model} (revision ${entry.revision}, journal line ${line})`
      }
    }
    return undefined
  }

  const importSeed = Effect.gen(function*() {
    const models: Array<Activation> = []
    const staged: Array<SeedReport["staged"][number]> = []
    for (const file of yield* Seed.manifestFiles(config.seed.dir)) {
      const verified = yield* readSigned(yield* Seed.readManifest(file, config.maxManifestBytes))
      const manifest = verified.manifest
      const result = yield* Effect.scoped(Effect.gen(function*() {
        for (const artifact of manifest.artifacts) {
          yield* importSeedArtifact(artifact.digest, artifact.size, manifest.name)
        }
        return yield* activateVerified(verified, config.device, false, seedHeldBack(manifest)).pipe(
          Effect.catchTag("RollbackRefused", (e): Effect.Effect<Either.Either<Activation, string>> => Effect.succeed(Either.left(e.message)))
        )
      }))
      if (Either.isRight(result)) {
        models.push(result.right)
        continue
      }
      staged.push({ model: manifest.name, role: manifest.role, revision: manifest.revision, manifestDigest: verified.digest, reason: result.left })
      yield* Effect.logInfo("store: seed staged, not activated").pipe(
        Effect.annotateLogs({ service: "Store", model: manifest.name, revision: manifest.revision, reason: result.left })
      )
    }
    return { models, staged } satisfies SeedReport
  }).pipe(Effect.withSpan("Store.importSeed"))

  return Store.of({
    root,
    device: config.device,
    stage,
    stageLeased,
    verify,
    activate,
    active,
    candidates,
    list,
    lease,
    reap,
    importSeed
  })
})

/** The store, built from `StoreConfig`. */
export const layer: Layer.Layer<Store, UnsafePath | StoreIoError | InvalidKey | JournalCorrupt, StoreConfig> =
  Layer.scoped(Store, make)

/**
 * The store, with the configured seed imported (activated where its role has no other model)
 * before the layer is ready; cheap when the seed is already active. Fails when the seed fails.
 */
export const layerSeeded: Layer.Layer<Store, UnsafePath | StoreIoError | InvalidKey | JournalCorrupt | SeedError, StoreConfig> =
  Layer.scoped(Store, Effect.tap(make, (store) => store.importSeed))

/** Generates an ed25519 key pair into `dir`: `<hex>.pub` (trust it) and `<hex>.key` (0600). */
export const generateKeys = (dir: string): Effect.Effect<Signing.GeneratedKey, StoreIoError> =>
  Signing.generateKeyPair(dir)
