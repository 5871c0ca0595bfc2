/**
 * The public RPC group: the Provider (Generate as a stream, Decide, Prepare, Count, Readiness and
 * its changes) and the model store (list, import with progress, verify, activate, reap). Payloads
 * and results are the domain Schemas; the store's results get explicit wire Schemas here whose
 * types are exactly the Store's (digests and key ids stay branded, manifests stay `Manifest`).
 * Every RPC's error schema includes the RPC layer's own errors (`RpcLayerError`: the server's
 * refusals, and the client's `ConnectionFailed`), so any single call can fail with a typed error.
 */
import * as Rpc from "@effect/rpc/Rpc"
import * as RpcGroup from "@effect/rpc/RpcGroup"
import * as Schema from "effect/Schema"
import { Digest } from "../domain/Digest.js"
import {
  CountRequest,
  CountResult,
  DecideRequest,
  DecideResult,
  GenerateChunk,
  GenerateRequest,
  PrepareRequest,
  PrepareResult,
  Readiness
} from "../domain/Inference.js"
import { KeyId, Manifest, Role } from "../domain/Manifest.js"
import { ProviderError } from "../services/ProviderError.js"
import type * as Store from "../services/Store.js"
import { StoreError } from "../services/StoreError.js"
import { RpcLayerError } from "./RpcError.js"

// ---------------------------------------------------------------------------------------------
// Store wire schemas
// ---------------------------------------------------------------------------------------------

/** `Store.Activation` on the wire. */
export const Activation = Schema.Struct({
  model: Schema.String,
  role: Role,
  device: Schema.String,
  revision: Schema.Int,
  manifestDigest: Digest,
  keyId: KeyId,
  /** True when this exact manifest was already the active one (nothing was appended). */
  alreadyActive: Schema.Boolean
})
export type Activation = typeof Activation.Type

export const ActiveArtifact = Schema.Struct({
  digest: Digest,
  size: Schema.NonNegativeInt,
  mediaType: Schema.String,
  /** Where the blob lives on the server's machine. */
  path: Schema.String
})

/** `Store.ActiveModel` on the wire. */
export const ActiveModel = Schema.Struct({
  model: Schema.String,
  role: Role,
  device: Schema.String,
  revision: Schema.Int,
  manifestDigest: Digest,
  keyId: KeyId,
  manifest: Manifest,
  artifacts: Schema.Array(ActiveArtifact),
  activatedAt: Schema.String,
  journalLine: Schema.Int
})
export type ActiveModel = typeof ActiveModel.Type

/** `Store.PassedOver` on the wire: an activation that cannot be used, and why. */
export const PassedOver = Schema.Struct({
  model: Schema.String,
  role: Role,
  device: Schema.String,
  revision: Schema.Int,
  manifestDigest: Digest,
  journalLine: Schema.Int,
  error: Schema.String,
  reason: Schema.String
})

/** `Store.Listing` on the wire. */
export const Listing = Schema.Struct({
  active: Schema.Array(ActiveModel),
  passedOver: Schema.Array(PassedOver),
  blobs: Schema.Array(Schema.Struct({
    digest: Digest,
    size: Schema.NonNegativeInt,
    referenced: Schema.Boolean,
    leased: Schema.Boolean
  }))
})
export type Listing = typeof Listing.Type

/** A blob that hashed to its digest (`Store.VerifiedBlob` without its inode identity). */
export const VerifiedBlob = Schema.Struct({
  digest: Digest,
  path: Schema.String,
  size: Schema.NonNegativeInt
})
export type VerifiedBlob = typeof VerifiedBlob.Type

/** `Store.ReapReport` on the wire. */
export const ReapReport = Schema.Struct({
  removed: Schema.Array(Digest),
  freedBytes: Schema.NonNegativeInt,
  kept: Schema.Array(Digest),
  staleLeases: Schema.NonNegativeInt,
  staleStaging: Schema.NonNegativeInt
})
export type ReapReport = typeof ReapReport.Type

// The wire types are the Store's types: a change on either side breaks the build here.
type Same<A, B> = [A] extends [B] ? [B] extends [A] ? true : false : false
void ([true, true, true, true] satisfies [
  Same<Store.Activation, Activation>,
  Same<Store.Listing, Listing>,
  Same<Store.ReapReport, ReapReport>,
  Same<Pick<Store.VerifiedBlob, "digest" | "path" | "size">, VerifiedBlob>
])

/** Activation options: the device (default: the server store's) and whether an older revision may replace a newer one. */
export const ActivateOptions = {
  device: Schema.optional(Schema.String),
  allowRollback: Schema.optional(Schema.Boolean)
}

/**
 * Import a model file that is on the server's machine: `path` (absolute) is staged against the
 * single artifact of the signed `manifest` (its JSON text), then the manifest is activated. The
 * manifest's signature, expiry and revision are checked before any byte is copied.
 */
export const ImportRequest = Schema.Struct({
  manifest: Schema.String,
  path: Schema.String,
  ...ActivateOptions
})
export type ImportRequest = typeof ImportRequest.Type

/**
 * The events of an import, in order: `Verified` (the manifest is trusted and may be activated),
 * `Progress` while copying (at most every 100 ms, and once at the end), `Staged`, and last
 * `Activated`. An artifact already in the store is not copied (no `Progress`).
 */
export const ImportEvent = Schema.Union(
  Schema.TaggedStruct("Verified", { model: Schema.String, role: Role, revision: Schema.Int }),
  Schema.TaggedStruct("Progress", {
    digest: Digest,
    bytes: Schema.NonNegativeInt,
    total: Schema.NonNegativeInt,
    bytesPerSecond: Schema.Number
  }),
  Schema.TaggedStruct("Staged", { digest: Digest, size: Schema.NonNegativeInt }),
  Schema.TaggedStruct("Activated", { activation: Activation })
)
export type ImportEvent = typeof ImportEvent.Type

// ---------------------------------------------------------------------------------------------
// The group
// ---------------------------------------------------------------------------------------------

const InferenceError = Schema.Union(ProviderError, RpcLayerError)
const StoreRpcError = Schema.Union(StoreError, RpcLayerError)

export class NativegenRpcs extends RpcGroup.make(
  Rpc.make("Generate", { payload: GenerateRequest, success: GenerateChunk, error: InferenceError, stream: true }),
  Rpc.make("Decide", { payload: DecideRequest, success: DecideResult, error: InferenceError }),
  Rpc.make("Prepare", { payload: PrepareRequest, success: PrepareResult, error: InferenceError }),
  Rpc.make("Count", { payload: CountRequest, success: CountResult, error: InferenceError }),
  Rpc.make("Readiness", { success: Readiness, error: RpcLayerError }),
  /** The current readiness, then each change. */
  Rpc.make("WatchReadiness", { success: Readiness, error: RpcLayerError, stream: true }),
  Rpc.make("StoreList", { success: Listing, error: StoreRpcError }),
  Rpc.make("StoreImport", { payload: ImportRequest, success: ImportEvent, error: StoreRpcError, stream: true }),
  Rpc.make("StoreVerify", { payload: { digest: Schema.String }, success: VerifiedBlob, error: StoreRpcError }),
  Rpc.make("StoreActivate", {
    payload: { manifest: Schema.String, ...ActivateOptions },
    success: Activation,
    error: StoreRpcError
  }),
  Rpc.make("StoreReap", {
    /** Unreferenced blobs younger than this are kept. Default: the server store's `reapGrace`. */
    payload: { graceMillis: Schema.optional(Schema.NonNegativeInt) },
    success: ReapReport,
    error: StoreRpcError
  })
) {}
