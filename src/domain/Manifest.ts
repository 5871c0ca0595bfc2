/**
 * Model manifests: the signed description of one model revision (name, role, revision,
 * artifacts, optional expiry), its canonical JSON encoding (sorted keys, no whitespace) which is
 * what gets signed and hashed, and the signed envelope `{ manifest, keyId, signature }`.
 */
import * as Crypto from "node:crypto"
import * as Schema from "effect/Schema"
import { Digest } from "./Digest.js"

/** What a model is for. */
export const Role = Schema.Literal("generation", "decision")
export type Role = typeof Role.Type

/** A model name: lowercase letters, digits, `.`, `_`, `-`; 1 to 64 characters. */
export const ModelName = Schema.String.pipe(
  Schema.pattern(/^[a-z0-9][a-z0-9._-]{0,63}$/, { identifier: "ModelName" })
)

/** A key id: `ed25519:` and the first 16 hex digits of sha256 over the key's SPKI DER. */
export const KeyId = Schema.String.pipe(
  Schema.pattern(/^ed25519:[0-9a-f]{16}$/, { identifier: "KeyId" }),
  Schema.brand("nativegen/KeyId")
)
export type KeyId = typeof KeyId.Type

/** One content-addressed file of a model. */
export class Artifact extends Schema.Class<Artifact>("nativegen/Artifact")({
  digest: Digest,
  /** Exact size in bytes. */
  size: Schema.Int.pipe(Schema.nonNegative()),
  /** For example `application/vnd.gguf`. */
  mediaType: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(255))
}) {}

/** One revision of a model. */
export class Manifest extends Schema.Class<Manifest>("nativegen/Manifest")({
  name: ModelName,
  role: Role,
  /** Monotonically increasing per model; activation refuses anything not newer than the active one. */
  revision: Schema.Int.pipe(Schema.positive()),
  artifacts: Schema.Array(Artifact).pipe(Schema.minItems(1)),
  /** After this instant the manifest cannot be activated. */
  expiresAt: Schema.optionalWith(Schema.Date, { exact: true })
}) {}

/** The GGUF media type used by the seed. */
export const ggufMediaType = "application/vnd.gguf"

/** A signed manifest as stored and exchanged. `signature` is base64 ed25519 over `signingPayload`. */
export class SignedManifest extends Schema.Class<SignedManifest>("nativegen/SignedManifest")({
  manifest: Manifest,
  keyId: KeyId,
  signature: Schema.String.pipe(Schema.pattern(/^[A-Za-z0-9+/]{86}==$/, { identifier: "Ed25519Signature" }))
}) {}

/** Strict decoding: unknown fields are errors, not silently dropped. */
export const decodeManifest = Schema.decodeUnknownEither(Manifest, { onExcessProperty: "error", errors: "all" })
export const encodeManifest = Schema.encodeSync(Manifest)
export const encodeSignedManifest = Schema.encodeSync(SignedManifest)

/**
 * Canonical JSON: object keys sorted by UTF-16 code unit, no whitespace, arrays in order. Only
 * JSON values are accepted (finite numbers, strings, booleans, null, arrays, plain objects).
 */
export const canonicalJson = (value: unknown): string => {
  if (value === null || typeof value === "boolean" || typeof value === "string") return JSON.stringify(value)
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new TypeError("canonical JSON: non-finite number")
    return JSON.stringify(value)
  }
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`
  if (typeof value === "object") {
    const record = value as Record<string, unknown>
    const keys = Object.keys(record).filter((k) => record[k] !== undefined).sort()
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(record[k])}`).join(",")}}`
  }
  throw new TypeError(`canonical JSON: ${typeof value} is not a JSON value`)
}

/** Domain separation: a manifest signature can never be mistaken for a signature over anything else. */
const signingPrefix = "nativegen/manifest/v1\n"

/** The bytes an ed25519 signature covers, given a manifest's encoded (JSON) form. */
export const signingPayload = (encodedManifest: unknown): Buffer =>
  Buffer.from(signingPrefix + canonicalJson(encodedManifest), "utf8")

/** The canonical bytes of a manifest. */
export const canonicalBytes = (manifest: Manifest): Buffer => Buffer.from(canonicalJson(encodeManifest(manifest)), "utf8")

/** The manifest digest: sha256 of its canonical JSON (computed from its encoded form). */
export const digestOfEncoded = (encodedManifest: unknown): Digest =>
  Digest.make(`sha256:${Crypto.createHash("sha256").update(canonicalJson(encodedManifest), "utf8").digest("hex")}`)

/** The manifest digest of a decoded manifest. */
export const digestOf = (manifest: Manifest): Digest => digestOfEncoded(encodeManifest(manifest))
