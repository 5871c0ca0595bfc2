/**
 * The public RPC group: the Provider (Generate as a stream, Decide, Prepare, Count, Tokenize,
 * Readiness and its changes) and the model store (list, import with progress, verify, activate, deactivate, reap). Payloads
 * and results are the domain Schemas, the store's results those of src/domain/StoreResults.ts
 * (re-exported here for the client and the CLI); only the import's request and events are declared here.
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
  Readiness,
  TokenizeRequest,
  TokenizeResult
} from "../domain/Inference.js"
import { Role } from "../domain/Manifest.js"
import { Activation, Deactivation, Listing, ReapReport, VerifiedBlob } from "../domain/StoreResults.js"
import { ProviderError } from "../services/ProviderError.js"
import { StoreError } from "../services/StoreError.js"
import { RpcLayerError } from "./RpcError.js"

export {
  Activation,
  ActiveArtifact,
  ActiveModel,
  Deactivation,
  Listing,
  PassedOver,
  ReapReport,
  VerifiedBlob
} from "../domain/StoreResults.js"

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
  Rpc.make("Tokenize", { payload: TokenizeRequest, success: TokenizeResult, error: InferenceError }),
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
  /** Deactivates a model on a device (default: the server store's); the server keeps what it loaded until it restarts. */
  Rpc.make("StoreDeactivate", {
    payload: { model: Schema.String, device: Schema.optional(Schema.String) },
    success: Deactivation,
    error: StoreRpcError
  }),
  Rpc.make("StoreReap", {
    /** Unreferenced blobs younger than this are kept. Default: the server store's `reapGrace`. */
    payload: { graceMillis: Schema.optional(Schema.NonNegativeInt) },
    success: ReapReport,
    error: StoreRpcError
  })
) {}
