/**
 * What the model store answers, declared once: an activation, a deactivation, the active models with their
 * artifacts, activations passed over, a listing, a verified blob and a reap report. The Store
 * service's result types are these Schemas' types, and the public RPC group sends them as they are
 * (digests and key ids stay branded, manifests stay `Manifest`).
 */
import * as Schema from "effect/Schema"
import { Digest } from "./Digest.js"
import { KeyId, Manifest, Role } from "./Manifest.js"

/** Which signed revision of a model, by its manifest's digest, on which device. */
export const RevisionOnDevice = Schema.Struct({
  model: Schema.String,
  role: Role,
  device: Schema.String,
  revision: Schema.Int,
  manifestDigest: Digest
})
export type RevisionOnDevice = typeof RevisionOnDevice.Type

/** The result of an activation. */
export const Activation = Schema.Struct({
  ...RevisionOnDevice.fields,
  keyId: KeyId,
  /** True when this exact manifest was already the active one (nothing was appended). */
  alreadyActive: Schema.Boolean
})
export type Activation = typeof Activation.Type

/**
 * The result of a deactivation (`store rm`): the model's activations on the device are hidden
 * from then on, in every role they had; its blobs are kept only while something else names them
 * or a lease holds them (a running server keeps the lease of what it loaded until it restarts).
 */
export const Deactivation = Schema.Struct({
  model: Schema.String,
  device: Schema.String,
  /** The revision and manifest that were active. */
  revision: Schema.Int,
  manifestDigest: Digest,
  /** The roles its hidden activations had. */
  roles: Schema.Array(Role),
  /** The blobs no other active manifest names: reaping may now remove them (when no lease holds them). */
  collectable: Schema.Array(Digest)
})
export type Deactivation = typeof Deactivation.Type

/** An artifact of an active manifest, with where it lives. */
export const ActiveArtifact = Schema.Struct({
  digest: Digest,
  size: Schema.NonNegativeInt,
  mediaType: Schema.String,
  /** Absolute path of the published blob (on the store's machine). Lease it before use. */
  path: Schema.String
})
export type ActiveArtifact = typeof ActiveArtifact.Type

/** A verified manifest for a (model, device) whose artifacts are all in the store. */
export const ModelRevision = Schema.Struct({
  ...RevisionOnDevice.fields,
  keyId: KeyId,
  manifest: Manifest,
  artifacts: Schema.Array(ActiveArtifact)
})
export type ModelRevision = typeof ModelRevision.Type

/** The active manifest for a (model, device). */
export const ActiveModel = Schema.Struct({
  ...ModelRevision.fields,
  /** When the activation was journaled (informational). */
  activatedAt: Schema.String,
  /** 1-based journal line of the activation. */
  journalLine: Schema.Int
})
export type ActiveModel = typeof ActiveModel.Type

/**
 * An activation that cannot be used under today's trust or with what the store holds: its signer
 * is no longer trusted (or may not sign that model), its stored manifest or an artifact is gone.
 */
export const PassedOver = Schema.Struct({
  ...RevisionOnDevice.fields,
  journalLine: Schema.Int,
  /** The refusal's tag (`UnknownKey`, `KeyNotAllowed`, `ArtifactMissing`, ...). */
  error: Schema.String,
  /** The refusal's message. */
  reason: Schema.String
})
export type PassedOver = typeof PassedOver.Type

/** A blob in the store, as a listing shows it. */
export const ListedBlob = Schema.Struct({
  digest: Digest,
  size: Schema.NonNegativeInt,
  /** Named by an active manifest. */
  referenced: Schema.Boolean,
  /** Held by a live lease of any process. */
  leased: Schema.Boolean
})
export type ListedBlob = typeof ListedBlob.Type

/** What the store holds. */
export const Listing = Schema.Struct({
  /** Per (model, device): its newest activation that is usable. */
  active: Schema.Array(ActiveModel),
  /** Activations newer than the one listed for their model that cannot be used, and why. */
  passedOver: Schema.Array(PassedOver),
  blobs: Schema.Array(ListedBlob)
})
export type Listing = typeof Listing.Type

/**
 * A blob that hashed to its digest. (The store's own verification also keeps the inode identity
 * the file had when hashed; that does not leave the store's machine.)
 */
export const VerifiedBlob = Schema.Struct({
  digest: Digest,
  path: Schema.String,
  size: Schema.NonNegativeInt
})
export type VerifiedBlob = typeof VerifiedBlob.Type

/** What a reap removed and kept. */
export const ReapReport = Schema.Struct({
  removed: Schema.Array(Digest),
  freedBytes: Schema.NonNegativeInt,
  /** Unreferenced blobs kept because they are leased or younger than the grace period. */
  kept: Schema.Array(Digest),
  /** Lease files of dead processes removed. */
  staleLeases: Schema.NonNegativeInt,
  /** Staging files of dead processes removed. */
  staleStaging: Schema.NonNegativeInt
})
export type ReapReport = typeof ReapReport.Type
