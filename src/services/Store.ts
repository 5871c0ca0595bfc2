/**
 * The model store: which model bytes are trusted and current. Content-addressed blobs (staged
 * with size and digest enforced, published durably), ed25519-signed manifests, an append-only
 * activation journal under an exclusive cross-process lock, reference-counted reader leases that
 * survive as files for other processes to see, reaping, and the packaged seed.
 *
 * This module is the service's Tag, its error unions, `make` composing the parts under
 * `store/` (each given the one open store, `store/Parts.ts`) and the layers.
 *
 * Layout of a store root:
 * `store.lock`, `journal.jsonl`, `blobs/sha256/<2 hex>/<64 hex>`, `manifests/sha256/<64 hex>.json`,
 * `leases/<64 hex>/<owner>.<random>.lease`, `staging/`, `quarantine/`, `recovered/`.
 */
import * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import type { Role, SignedManifest } from "../domain/Manifest.js"
import type * as StoreResults from "../domain/StoreResults.js"
import type {
  ArtifactCorrupt,
  ArtifactMissing,
  BadSignature,
  DigestMismatch,
  InvalidDigest,
  InvalidKey,
  InvalidManifest,
  InvalidModelFile,
  InvalidSize,
  JournalCorrupt,
  KeyNotAllowed,
  ManifestExpired,
  ManifestMissing,
  ManifestTooLarge,
  ManifestUnsigned,
  NotActive,
  RollbackRefused,
  SeedNotRemovable,
  SizeExceeded,
  SizeMismatch,
  StoreIoError,
  UnknownKey,
  UnsafePath
} from "./StoreError.js"
import * as Activation from "./store/Activation.js"
import type { ActivateOptions } from "./store/Activation.js"
import type { StageSource, VerifiedBlob } from "./store/Blobs.js"
import * as Candidates from "./store/Candidates.js"
import * as Deactivation from "./store/Deactivation.js"
import type { DeactivateOptions } from "./store/Deactivation.js"
import type { Candidate, Selector, StoreFault, UnusableError } from "./store/Candidates.js"
import * as Listing from "./store/Listing.js"
import * as Parts from "./store/Parts.js"
import * as Reap from "./store/Reap.js"
import * as ReaderLeases from "./store/ReaderLeases.js"
import type { Lease } from "./store/ReaderLeases.js"
import * as SeedImport from "./store/SeedImport.js"
import type { SeedReport } from "./store/SeedImport.js"
import * as Signing from "./store/Signing.js"
import * as Staging from "./store/Staging.js"
import type { StageOptions } from "./store/Staging.js"
import { StoreConfig } from "./store/StoreConfig.js"

export type { Progress, StageSource, VerifiedBlob } from "./store/Blobs.js"
/** The store's results: the domain Schemas' types (src/domain/StoreResults.ts). */
export type {
  Activation,
  ActiveArtifact,
  Deactivation,
  ActiveModel,
  ListedBlob,
  Listing,
  ModelRevision,
  PassedOver,
  ReapReport
} from "../domain/StoreResults.js"
export type { ActivateOptions } from "./store/Activation.js"
export type { DeactivateOptions } from "./store/Deactivation.js"
export type { Candidate, Selector, StoreFault, UnusableError } from "./store/Candidates.js"
export type { Lease } from "./store/ReaderLeases.js"
export type { SeedSource } from "./store/Seed.js"
export type { SeedReport } from "./store/SeedImport.js"
export type { GeneratedKey } from "./store/Signing.js"
export type { StageOptions } from "./store/Staging.js"
export { StoreConfig } from "./store/StoreConfig.js"
export type { StoreConfigShape } from "./store/StoreConfig.js"

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

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

export type DeactivateError = NotActive | SeedNotRemovable | InvalidManifest | ReapError

/** `NotActive` when nothing was activated; the newest activation's refusal when none is usable. */
export type ActiveError = NotActive | UnusableError | StoreFault

export type LeaseError = InvalidDigest | ArtifactMissing | ArtifactCorrupt | UnsafePath | StoreIoError

export type ReapError = JournalCorrupt | ManifestMissing | ManifestTooLarge | InvalidManifest | UnsafePath | StoreIoError

export type SeedError = ActivateError | StageError | InvalidKey | ManifestMissing

// ---------------------------------------------------------------------------------------------
// The service
// ---------------------------------------------------------------------------------------------

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
    source: StageSource<E>,
    expectedDigest: string,
    declaredSize: number,
    options?: StageOptions
  ) => Effect.Effect<string, StageError | E>
  /**
   * `stage`, holding a lease (taken before publishing) for the scope: no reap can collect the
   * blob between staging and a later `activate`.
   */
  readonly stageLeased: <E = never>(
    source: StageSource<E>,
    expectedDigest: string,
    declaredSize: number,
    options?: StageOptions
  ) => Effect.Effect<Lease, StageError | E, Scope.Scope>
  /** Re-hashes a published blob; a corrupt one is quarantined (`ArtifactCorrupt`). */
  readonly verify: (digest: string) => Effect.Effect<VerifiedBlob, VerifyError>
  /**
   * Verifies a signed manifest (an object, or its JSON text or bytes, size-checked before
   * parsing) and every artifact it names, then journals it as active for (model, device).
   */
  readonly activate: (
    signed: SignedManifest | string | Uint8Array,
    options?: ActivateOptions
  ) => Effect.Effect<StoreResults.Activation, ActivateError>
  /**
   * Deactivates a model on a device (default device when omitted): its activations there are
   * hidden from then on, in every role; its blobs become collectable (`reap`) unless another
   * active manifest names them or a lease holds them. The seed's models are refused.
   */
  readonly deactivate: (
    model: string,
    options?: DeactivateOptions
  ) => Effect.Effect<StoreResults.Deactivation, DeactivateError>
  /**
   * The active manifest for a model or role on a device (default device when omitted): the newest
   * activation that is usable under today's trust. Newer ones that are not are passed over.
   */
  readonly active: (selector: Selector, device?: string) => Effect.Effect<StoreResults.ActiveModel, ActiveError>
  /** What a role may run, in the order to try (see `Candidate`). */
  readonly candidates: (role: Role, device?: string) => Effect.Effect<ReadonlyArray<Candidate>, StoreFault>
  /** The active manifests (per model, the newest usable), the activations passed over, every published blob. */
  readonly list: Effect.Effect<StoreResults.Listing, ReapError>
  /**
   * A scoped reader lease: while held (by any process), reaping keeps the blob. The blob is
   * verified on first lease in this process (and again whenever its identity changed).
   * Reference counted within the process.
   */
  readonly lease: (digest: string) => Effect.Effect<Lease, LeaseError, Scope.Scope>
  /** Removes blobs that no active manifest names, no live lease holds, and that are older than the grace. */
  readonly reap: (options?: { readonly grace?: Duration.DurationInput }) => Effect.Effect<StoreResults.ReapReport, ReapError>
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

/** Builds the store from its configuration. Fails on an unsafe root or a corrupt journal. */
export const make: Effect.Effect<
  Store["Type"],
  UnsafePath | StoreIoError | InvalidKey | JournalCorrupt,
  StoreConfig | Scope.Scope
> = Effect.gen(function*() {
  const parts = yield* Parts.open(yield* StoreConfig)
  const { lease } = yield* ReaderLeases.make(parts)
  const { stage, stageLeased, verify } = Staging.make(parts)
  const { activate, activateVerified } = Activation.make(parts)
  const reading = Candidates.make(parts)
  const reaping = Reap.make(parts, reading)
  const { deactivate } = Deactivation.make(parts, reaping)
  return Store.of({
    root: parts.root,
    device: parts.config.device,
    stage,
    stageLeased,
    verify,
    activate,
    deactivate,
    active: reading.active,
    candidates: reading.candidates,
    list: Listing.make(parts, reaping),
    lease,
    reap: reaping.reap,
    importSeed: SeedImport.make(parts, { lease, stageLeased, activateVerified })
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
