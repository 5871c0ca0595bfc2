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
import * as Os from "node:os"
import * as Path from "node:path"
import * as Digest from "../domain/Digest.js"
import type { KeyId, Manifest, Role, SignedManifest } from "../domain/Manifest.js"
import {
  ArtifactCorrupt,
  ArtifactMissing,
  type BadSignature,
  type DigestMismatch,
  type InvalidDigest,
  type InvalidKey,
  InvalidManifest,
  type InvalidSize,
  type JournalCorrupt,
  ManifestExpired,
  type ManifestMissing,
  type ManifestTooLarge,
  type ManifestUnsigned,
  NotActive,
  RollbackRefused,
  type SizeExceeded,
  type SizeMismatch,
  type StoreIoError,
  type UnknownKey,
  type UnsafePath
} from "./StoreError.js"
import * as Blobs from "./store/Blobs.js"
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

/** The result of an activation. */
export interface Activation {
  readonly model: string
  readonly role: Role
  readonly device: string
  readonly revision: number
  readonly manifestDigest: Digest.Digest
  readonly keyId: KeyId
  /** True when this exact manifest was already the active one (nothing was appended). */
  readonly alreadyActive: boolean
}

/** An artifact of an active manifest, with where it lives. */
export interface ActiveArtifact {
  readonly digest: Digest.Digest
  readonly size: number
  readonly mediaType: string
  /** Absolute path of the published blob (present when `active` returned). Lease it before use. */
  readonly path: string
}

/** The active manifest for a (model, device). */
export interface ActiveModel {
  readonly model: string
  readonly role: Role
  readonly device: string
  readonly revision: number
  readonly manifestDigest: Digest.Digest
  readonly keyId: KeyId
  readonly manifest: Manifest
  readonly artifacts: ReadonlyArray<ActiveArtifact>
  /** When the activation was journaled (informational). */
  readonly activatedAt: string
  /** 1-based journal line of the activation. */
  readonly journalLine: number
}

/** A held reader lease. */
export interface Lease {
  readonly digest: Digest.Digest
  readonly path: string
  readonly size: number
}

export interface Listing {
  readonly active: ReadonlyArray<ActiveModel>
  readonly blobs: ReadonlyArray<{
    readonly digest: Digest.Digest
    readonly size: number
    /** Named by an active manifest. */
    readonly referenced: boolean
    /** Held by a live lease of any process. */
    readonly leased: boolean
  }>
}

export interface ReapReport {
  readonly removed: ReadonlyArray<Digest.Digest>
  readonly freedBytes: number
  /** Unreferenced blobs kept because they are leased or younger than the grace period. */
  readonly kept: ReadonlyArray<Digest.Digest>
  /** Lease files of dead processes removed. */
  readonly staleLeases: number
  /** Staging files of dead processes removed. */
  readonly staleStaging: number
}

export interface SeedReport {
  readonly models: ReadonlyArray<Activation>
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
  | BadSignature
  | InvalidManifest
  | ManifestExpired
  | RollbackRefused
  | ArtifactMissing
  | ArtifactCorrupt
  | JournalCorrupt
  | UnsafePath
  | StoreIoError

export type ActiveError =
  | NotActive
  | ManifestMissing
  | ManifestTooLarge
  | ManifestUnsigned
  | UnknownKey
  | BadSignature
  | InvalidManifest
  | ArtifactMissing
  | JournalCorrupt
  | UnsafePath
  | StoreIoError

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
  /** The active manifest for a model or role on a device (default device when omitted). */
  readonly active: (selector: Selector, device?: string) => Effect.Effect<ActiveModel, ActiveError>
  /** Every active manifest and every published blob. */
  readonly list: Effect.Effect<Listing, ReapError | ActiveError>
  /**
   * A scoped reader lease: while held (by any process), reaping keeps the blob. The blob is
   * verified on first lease in this process (and again whenever its identity changed).
   * Reference counted within the process.
   */
  readonly lease: (digest: string) => Effect.Effect<Lease, LeaseError, Scope.Scope>
  /** Removes blobs that no active manifest names, no live lease holds, and that are older than the grace. */
  readonly reap: (options?: { readonly grace?: Duration.DurationInput }) => Effect.Effect<ReapReport, ReapError>
  /**
   * Imports and activates the configured seed: every seed artifact is verified (regenerated and
   * staged when absent or corrupt), then its manifest activated. Idempotent: an active seed
   * manifest is reported `alreadyActive` and nothing is journaled.
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

  const trusted = new Map<string, Signing.TrustedKey>()
  for (const [i, pem] of config.trustedKeys.entries()) {
    const key = yield* Either.match(Signing.publicKeyFromPem(pem, `trustedKeys[${i}]`), {
      onLeft: Effect.fail,
      onRight: Effect.succeed
    })
    trusted.set(key.keyId, key)
  }
  if (config.trustSeedKey) {
    const seedKey = yield* Effect.either(Seed.readKey(config.seed.dir))
    if (Either.isRight(seedKey)) trusted.set(seedKey.right.keyId, seedKey.right)
    else yield* Effect.logWarning("store: no seed key").pipe(Effect.annotateLogs({ service: "Store", reason: seedKey.left.message }))
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

  const checkRevision = (state: Journal.State, verified: Signing.Verified, device: string, allowRollback: boolean) => {
    const current = state.newest.get(Journal.key(verified.manifest.name, device))
    if (current === undefined) return Effect.succeed(false)
    if (current.entry.manifest === verified.digest) return Effect.succeed(true)
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
    return Effect.succeed(false)
  }

  const activation = (verified: Signing.Verified, device: string, alreadyActive: boolean): Activation => ({
    model: verified.manifest.name,
    role: verified.manifest.role,
    device,
    revision: verified.manifest.revision,
    manifestDigest: verified.digest,
    keyId: verified.keyId,
    alreadyActive
  })

  const activate = Effect.fn("Store.activate")(function*(
    signed: SignedManifest | string | Uint8Array,
    options?: ActivateOptions
  ) {
    const device = yield* checkDevice(options?.device ?? config.device)
    const allowRollback = options?.allowRollback === true
    const verified = yield* readSigned(signed)
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
    const before = yield* withLock(journal.read)
    if (yield* checkRevision(before, verified, device, allowRollback)) return activation(verified, device, true)
    const checked: Array<Blobs.VerifiedBlob> = []
    for (const artifact of manifest.artifacts) {
      const blob = yield* blobs.verify(artifact.digest, { trustIdentity: true })
      if (blob.size !== artifact.size) {
        return yield* Effect.fail(
          new InvalidManifest({ reason: `artifact ${artifact.digest} is ${blob.size} bytes, the manifest says ${artifact.size}` })
        )
      }
      checked.push(blob)
    }
    return yield* withLock(Effect.gen(function*() {
      const state = yield* journal.read
      if (yield* checkRevision(state, verified, device, allowRollback)) return activation(verified, device, true)
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
      return activation(verified, device, false)
    }))
  })

  // --- reading what is active -------------------------------------------------------------

  const describeActive = (indexed: Journal.Indexed) =>
    Effect.gen(function*() {
      const verified = yield* manifests.readVerified(indexed.entry.manifest, trusted)
      const artifacts: Array<ActiveArtifact> = []
      for (const artifact of verified.manifest.artifacts) {
        const st = yield* blobs.statOf(artifact.digest)
        if (Option.isNone(st) || !st.value.isFile()) return yield* Effect.fail(new ArtifactMissing({ digest: artifact.digest }))
        artifacts.push({ digest: artifact.digest, size: artifact.size, mediaType: artifact.mediaType, path: blobs.pathOf(artifact.digest) })
      }
      return {
        model: indexed.entry.model,
        role: indexed.entry.role,
        device: indexed.entry.device,
        revision: indexed.entry.revision,
        manifestDigest: indexed.entry.manifest,
        keyId: verified.keyId,
        manifest: verified.manifest,
        artifacts,
        activatedAt: indexed.entry.at,
        journalLine: indexed.line
      } satisfies ActiveModel
    })

  const findActive = (state: Journal.State, selector: Selector, device: string): Indexed | undefined => {
    if ("model" in selector) return state.newest.get(Journal.key(selector.model, device))
    let found: Indexed | undefined
    for (const indexed of state.newest.values()) {
      if (indexed.entry.role === selector.role && indexed.entry.device === device && (found === undefined || indexed.line > found.line)) {
        found = indexed
      }
    }
    return found
  }
  type Indexed = Journal.Indexed

  const active = Effect.fn("Store.active")(function*(selector: Selector, device?: string) {
    const dev = device ?? config.device
    const state = yield* withLock(journal.read)
    const found = findActive(state, selector, dev)
    if (found === undefined) {
      return yield* Effect.fail(
        new NotActive({ selector: "model" in selector ? `model:${selector.model}` : `role:${selector.role}`, device: dev })
      )
    }
    return yield* describeActive(found)
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

  const referencedBy = (state: Journal.State) =>
    Effect.gen(function*() {
      const referenced = new Set<string>()
      for (const indexed of state.newest.values()) {
        const manifest = yield* manifests.readReferenced(indexed.entry.manifest)
        for (const artifact of manifest.artifacts) referenced.add(artifact.digest)
      }
      return referenced
    })

  const reap = Effect.fn("Store.reap")(function*(options?: { readonly grace?: Duration.DurationInput }) {
    const grace = Duration.toMillis(options?.grace === undefined ? config.reapGrace : Duration.decode(options.grace))
    const now = yield* Clock.currentTimeMillis
    return yield* withLock(Effect.gen(function*() {
      const state = yield* journal.read
      const referenced = yield* referencedBy(state)
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
    const { referenced, scan, state } = yield* withLock(Effect.gen(function*() {
      const state = yield* journal.read
      return { state, referenced: yield* referencedBy(state), scan: yield* leases.scan }
    }))
    const activeModels: Array<ActiveModel> = []
    for (const indexed of [...state.newest.values()].sort((a, b) => a.line - b.line)) {
      activeModels.push(yield* describeActive(indexed))
    }
    const all = yield* blobs.list
    return {
      active: activeModels,
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
      const dir = yield* Fs.orStoreError(SafePath.ensureDir(root, [Blobs.stagingDir], true))
      const temp = Path.join(dir, `${owner}.${Crypto.randomBytes(6).toString("hex")}.seed`)
      yield* Effect.acquireUseRelease(
        Effect.as(config.seed.materialize(model, temp), temp),
        () => stageLeased(temp, digest, size),
        () => Effect.ignore(Fs.unlink(temp))
      )
    })

  const importSeed = Effect.gen(function*() {
    const files = yield* Seed.manifestFiles(config.seed.dir)
    const models: Array<Activation> = []
    for (const file of files) {
      const bytes = yield* Effect.scoped(Effect.gen(function*() {
        const opened = yield* SafePath.openSource(file)
        return yield* Manifests.readLimited(opened, config.maxManifestBytes)
      })).pipe(Fs.orStoreError)
      const verified = yield* readSigned(bytes)
      const result = yield* Effect.scoped(Effect.gen(function*() {
        for (const artifact of verified.manifest.artifacts) {
          yield* importSeedArtifact(artifact.digest, artifact.size, verified.manifest.name)
        }
        return yield* activate(bytes)
      }))
      models.push(result)
    }
    return { models } satisfies SeedReport
  }).pipe(Effect.withSpan("Store.importSeed"))

  return Store.of({
    root,
    device: config.device,
    stage,
    stageLeased,
    verify,
    activate,
    active,
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
 * The store, with the configured seed imported and activated before the layer is ready (the
 * runtime then works out of the box; cheap when the seed is already active).
 */
export const layerSeeded: Layer.Layer<Store, UnsafePath | StoreIoError | InvalidKey | JournalCorrupt | SeedError, StoreConfig> =
  Layer.scoped(Store, Effect.tap(make, (store) => store.importSeed))

/** Generates an ed25519 key pair into `dir`: `<hex>.pub` (trust it) and `<hex>.key` (0600). */
export const generateKeys = (dir: string): Effect.Effect<Signing.GeneratedKey, StoreIoError> =>
  Signing.generateKeyPair(dir)
