/**
 * Every refusal of the model store, as a Schema tagged error carrying the facts a user needs
 * (which digest, which key, which sizes, which journal line). These cross the RPC boundary.
 */
import * as Schema from "effect/Schema"

/** A value that should have been a digest is not one; rejected before any path was built. */
export class InvalidDigest extends Schema.TaggedError<InvalidDigest>()("InvalidDigest", {
  /** The offending value, JSON-quoted and cut to 100 characters. */
  value: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `invalid digest ${this.value}: ${this.reason}`
  }
}

/** The staged bytes hash to another digest than the one declared; nothing was published. */
export class DigestMismatch extends Schema.TaggedError<DigestMismatch>()("DigestMismatch", {
  expected: Schema.String,
  actual: Schema.String
}) {
  override get message() {
    return `digest mismatch: expected ${this.expected}, got ${this.actual}`
  }
}

/** The source sent more bytes than declared; copying stopped at the first byte past the size. */
export class SizeExceeded extends Schema.TaggedError<SizeExceeded>()("SizeExceeded", {
  digest: Schema.String,
  declared: Schema.Number,
  /** Bytes received when copying stopped (at least declared + 1). */
  received: Schema.Number
}) {
  override get message() {
    return `artifact ${this.digest} exceeds its declared size ${this.declared} (received ${this.received} bytes)`
  }
}

/** The source ended before the declared size was reached. */
export class SizeMismatch extends Schema.TaggedError<SizeMismatch>()("SizeMismatch", {
  digest: Schema.String,
  declared: Schema.Number,
  received: Schema.Number
}) {
  override get message() {
    return `artifact ${this.digest} declared ${this.declared} bytes but the source gave ${this.received}`
  }
}

/** A declared size is not a non-negative safe integer. */
export class InvalidSize extends Schema.TaggedError<InvalidSize>()("InvalidSize", {
  digest: Schema.String,
  declared: Schema.Number
}) {
  override get message() {
    return `invalid declared size ${this.declared} for ${this.digest}`
  }
}

/** A path inside the store (or a staging source) is a symlink, FIFO, device or otherwise unsafe. */
export class UnsafePath extends Schema.TaggedError<UnsafePath>()("UnsafePath", {
  path: Schema.String,
  /** What was found: symlink, fifo, character device, block device, socket, directory, identity changed... */
  found: Schema.String
}) {
  override get message() {
    return `refusing unsafe path ${this.path}: ${this.found}`
  }
}

/** A manifest arrived without a key id or signature. */
export class ManifestUnsigned extends Schema.TaggedError<ManifestUnsigned>()("ManifestUnsigned", {
  reason: Schema.String
}) {
  override get message() {
    return `manifest is not signed: ${this.reason}`
  }
}

/** A manifest was signed by a key that is not trusted by this store's configuration. */
export class UnknownKey extends Schema.TaggedError<UnknownKey>()("UnknownKey", {
  keyId: Schema.String
}) {
  override get message() {
    return `manifest signed by unknown key ${this.keyId}`
  }
}

/** The signature does not verify against the named (trusted) key. */
export class BadSignature extends Schema.TaggedError<BadSignature>()("BadSignature", {
  keyId: Schema.String
}) {
  override get message() {
    return `bad manifest signature for key ${this.keyId}`
  }
}

/** A signed manifest's contents are not a valid manifest (bad JSON, a missing or extra field). */
export class InvalidManifest extends Schema.TaggedError<InvalidManifest>()("InvalidManifest", {
  reason: Schema.String
}) {
  override get message() {
    return `invalid manifest: ${this.reason}`
  }
}

/**
 * A key trusted only for some models (the seed's key: the seed's own names and roles) signed a
 * manifest for another model or role.
 */
export class KeyNotAllowed extends Schema.TaggedError<KeyNotAllowed>()("KeyNotAllowed", {
  keyId: Schema.String,
  model: Schema.String,
  role: Schema.String,
  /** What the key may sign, as `name (role)` entries. */
  allowed: Schema.Array(Schema.String)
}) {
  override get message() {
    return `key ${this.keyId} may sign only ${this.allowed.join(", ") || "nothing"}; refusing ${this.model} (${this.role})`
  }
}

/** An artifact declared as a GGUF model is not one llama.cpp could load (checked before activation). */
export class InvalidModelFile extends Schema.TaggedError<InvalidModelFile>()("InvalidModelFile", {
  digest: Schema.String,
  reason: Schema.String,
  /** Byte offset in the file where the reader stopped. */
  offset: Schema.Number
}) {
  override get message() {
    return `artifact ${this.digest} is not a loadable GGUF model: ${this.reason} (at byte ${this.offset})`
  }
}

/** The manifest's expiry has passed. */
export class ManifestExpired extends Schema.TaggedError<ManifestExpired>()("ManifestExpired", {
  model: Schema.String,
  revision: Schema.Number,
  expiresAt: Schema.String,
  now: Schema.String
}) {
  override get message() {
    return `manifest ${this.model} revision ${this.revision} expired at ${this.expiresAt} (now ${this.now})`
  }
}

/** The offered revision is not newer than the active one and no rollback was allowed. */
export class RollbackRefused extends Schema.TaggedError<RollbackRefused>()("RollbackRefused", {
  model: Schema.String,
  device: Schema.String,
  active: Schema.Number,
  offered: Schema.Number
}) {
  override get message() {
    return `refusing rollback of ${this.model} on ${this.device}: active revision ${this.active}, offered ${this.offered}`
  }
}

/** The manifest envelope is larger than the configured limit; refused before parsing. */
export class ManifestTooLarge extends Schema.TaggedError<ManifestTooLarge>()("ManifestTooLarge", {
  limit: Schema.Number,
  /** The size seen, or limit + 1 when reading stopped there. */
  size: Schema.Number
}) {
  override get message() {
    return `manifest of ${this.size} bytes exceeds the limit of ${this.limit} bytes`
  }
}

/** A named artifact is not in the store. */
export class ArtifactMissing extends Schema.TaggedError<ArtifactMissing>()("ArtifactMissing", {
  digest: Schema.String
}) {
  override get message() {
    return `artifact ${this.digest} is not in the store`
  }
}

/** A published artifact no longer hashes to its digest; it was moved to quarantine. */
export class ArtifactCorrupt extends Schema.TaggedError<ArtifactCorrupt>()("ArtifactCorrupt", {
  digest: Schema.String,
  actual: Schema.String,
  /** Where the corrupt bytes were moved. */
  quarantined: Schema.String
}) {
  override get message() {
    return `artifact ${this.digest} is corrupt (hashes to ${this.actual}); quarantined at ${this.quarantined}`
  }
}

/** A stored signed manifest named by the journal is missing. */
export class ManifestMissing extends Schema.TaggedError<ManifestMissing>()("ManifestMissing", {
  digest: Schema.String
}) {
  override get message() {
    return `manifest ${this.digest} named by the journal is not in the store`
  }
}

/** The journal is corrupt before its tail, or a line has a missing field or an unknown version. */
export class JournalCorrupt extends Schema.TaggedError<JournalCorrupt>()("JournalCorrupt", {
  path: Schema.String,
  /** 1-based line number. */
  line: Schema.Number,
  reason: Schema.String
}) {
  override get message() {
    return `journal ${this.path} is corrupt at line ${this.line}: ${this.reason}`
  }
}

/** No manifest is active for the model or role on the device. */
export class NotActive extends Schema.TaggedError<NotActive>()("NotActive", {
  /** `model:<name>` or `role:<role>`. */
  selector: Schema.String,
  device: Schema.String
}) {
  override get message() {
    return `nothing is active for ${this.selector} on device ${this.device}`
  }
}

/**
 * `store rm` of a model the packaged seed provides: the seed is every role's last resort, and its
 * next start would activate it again.
 */
export class SeedNotRemovable extends Schema.TaggedError<SeedNotRemovable>()("SeedNotRemovable", {
  model: Schema.String
}) {
  override get message() {
    return `${this.model} is a model of the packaged seed and cannot be removed (activate another model for its role instead)`
  }
}

/** A key file could not be read or is not an ed25519 key. */
export class InvalidKey extends Schema.TaggedError<InvalidKey>()("InvalidKey", {
  source: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `invalid key ${this.source}: ${this.reason}`
  }
}

/** An operating-system failure the store cannot classify (no space, permission denied, ...). */
export class StoreIoError extends Schema.TaggedError<StoreIoError>()("StoreIoError", {
  operation: Schema.String,
  path: Schema.String,
  cause: Schema.Defect
}) {
  override get message() {
    const code = typeof this.cause === "object" && this.cause !== null && "code" in this.cause
      ? ` (${String(this.cause.code)})`
      : ""
    return `store ${this.operation} failed on ${this.path}${code}`
  }
}

/** Every error the store can return. */
export const StoreError = Schema.Union(
  InvalidDigest,
  DigestMismatch,
  SizeExceeded,
  SizeMismatch,
  InvalidSize,
  UnsafePath,
  ManifestUnsigned,
  UnknownKey,
  KeyNotAllowed,
  BadSignature,
  InvalidManifest,
  InvalidModelFile,
  ManifestExpired,
  RollbackRefused,
  ManifestTooLarge,
  ArtifactMissing,
  ArtifactCorrupt,
  ManifestMissing,
  JournalCorrupt,
  NotActive,
  SeedNotRemovable,
  InvalidKey,
  StoreIoError
)
export type StoreError = typeof StoreError.Type

/** Refusals of a signed manifest (before any artifact is looked at). */
export type TrustError = ManifestTooLarge | ManifestUnsigned | UnknownKey | KeyNotAllowed | BadSignature | InvalidManifest

/** Failures of reading or writing one artifact. */
export type BlobError =
  | InvalidDigest
  | DigestMismatch
  | SizeExceeded
  | SizeMismatch
  | InvalidSize
  | UnsafePath
  | ArtifactMissing
  | ArtifactCorrupt
  | StoreIoError
