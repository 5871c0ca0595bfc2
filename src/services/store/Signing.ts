/**
 * ed25519 keys and manifest signatures (node:crypto). Reading a signed manifest checks, in
 * order: size (before parsing), JSON, presence of key id and signature, that the key is trusted,
 * the signature over the canonical manifest bytes, and only then the manifest's schema.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import * as Crypto from "node:crypto"
import * as Path from "node:path"
import * as Manifest from "../../domain/Manifest.js"
import type { Digest } from "../../domain/Digest.js"
import {
  BadSignature,
  InvalidKey,
  InvalidManifest,
  KeyNotAllowed,
  ManifestTooLarge,
  ManifestUnsigned,
  UnknownKey
} from "../StoreError.js"
import * as Fs from "./Fs.js"

/** A model a scoped key may sign: its name and role. */
export interface KeyScope {
  readonly name: string
  readonly role: Manifest.Role
}

/** A public key the store trusts, with its id. */
export interface TrustedKey {
  readonly keyId: Manifest.KeyId
  readonly publicKey: Crypto.KeyObject
  /** When present, the only models (name and role) this key may sign; absent: any model. */
  readonly scope?: ReadonlyArray<KeyScope> | undefined
}

/** `name (role)` for each model a scope allows. */
export const describeScope = (scope: ReadonlyArray<KeyScope>): ReadonlyArray<string> => scope.map((s) => `${s.name} (${s.role})`)

/** The key id of a public key: `ed25519:` + 16 hex of sha256(SPKI DER). */
export const keyIdOf = (publicKey: Crypto.KeyObject): Manifest.KeyId =>
  Manifest.KeyId.make(
    `ed25519:${Crypto.createHash("sha256").update(publicKey.export({ type: "spki", format: "der" })).digest("hex").slice(0, 16)}`
  )

/** Parses a PEM (SPKI) ed25519 public key. */
export const publicKeyFromPem = (pem: string, source = "public key"): Either.Either<TrustedKey, InvalidKey> => {
  try {
    const publicKey = Crypto.createPublicKey({ key: pem, format: "pem" })
    if (publicKey.asymmetricKeyType !== "ed25519") {
      return Either.left(new InvalidKey({ source, reason: `not ed25519 (${publicKey.asymmetricKeyType})` }))
    }
    return Either.right({ keyId: keyIdOf(publicKey), publicKey })
  } catch (cause) {
    return Either.left(new InvalidKey({ source, reason: cause instanceof Error ? cause.message : String(cause) }))
  }
}

/** Parses a PEM (PKCS#8) ed25519 private key. */
export const privateKeyFromPem = (pem: string, source = "private key"): Either.Either<Crypto.KeyObject, InvalidKey> => {
  try {
    const key = Crypto.createPrivateKey({ key: pem, format: "pem" })
    if (key.asymmetricKeyType !== "ed25519") {
      return Either.left(new InvalidKey({ source, reason: `not ed25519 (${key.asymmetricKeyType})` }))
    }
    return Either.right(key)
  } catch (cause) {
    return Either.left(new InvalidKey({ source, reason: cause instanceof Error ? cause.message : String(cause) }))
  }
}

/** Signs a manifest with a private key; the key id is derived from the key. */
export const sign = (manifest: Manifest.Manifest, privateKey: Crypto.KeyObject): Manifest.SignedManifest => {
  const payload = Manifest.signingPayload(Manifest.encodeManifest(manifest))
  const signature = Crypto.sign(null, payload, privateKey).toString("base64")
  const keyId = keyIdOf(Crypto.createPublicKey(privateKey))
  return new Manifest.SignedManifest({ manifest, keyId, signature })
}

/** The canonical JSON text of a signed manifest (what is written to disk and read back). */
export const envelopeText = (signed: Manifest.SignedManifest): string =>
  Manifest.canonicalJson(Manifest.encodeSignedManifest(signed))

/** A signed manifest whose signature verified against a trusted key. */
export interface Verified {
  readonly manifest: Manifest.Manifest
  readonly keyId: Manifest.KeyId
  /** sha256 of the canonical manifest JSON: the manifest's identity in the journal. */
  readonly digest: Digest
  /** The canonical envelope bytes, as stored. */
  readonly envelope: Buffer
}

export type ReadError = ManifestTooLarge | ManifestUnsigned | UnknownKey | KeyNotAllowed | BadSignature | InvalidManifest

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

const quote = (u: unknown) => {
  const s = typeof u === "string" ? JSON.stringify(u) : String(u)
  return s.length > 100 ? `${s.slice(0, 97)}...` : s
}

const utf8 = new TextDecoder("utf-8", { fatal: true })

/**
 * Reads and verifies a signed manifest envelope. `trusted` maps key ids to keys. Nothing in the
 * manifest is interpreted before its signature verified; a scoped key's manifest must then name
 * a model and role of its scope (`KeyNotAllowed`).
 */
export const readEnvelope = (
  bytes: Uint8Array,
  trusted: ReadonlyMap<string, TrustedKey>,
  maxBytes: number
): Either.Either<Verified, ReadError> => {
  if (bytes.length > maxBytes) return Either.left(new ManifestTooLarge({ limit: maxBytes, size: bytes.length }))
  let parsed: unknown
  try {
    parsed = JSON.parse(utf8.decode(bytes))
  } catch (cause) {
    return Either.left(new InvalidManifest({ reason: `not JSON: ${cause instanceof Error ? cause.message : String(cause)}` }))
  }
  if (!isRecord(parsed)) return Either.left(new InvalidManifest({ reason: "not a JSON object" }))
  const extra = Object.keys(parsed).filter((k) => k !== "manifest" && k !== "keyId" && k !== "signature")
  if (!("manifest" in parsed)) {
    return Either.left(new InvalidManifest({ reason: "no manifest field" }))
  }
  if (parsed.keyId === undefined || parsed.keyId === "" || parsed.signature === undefined || parsed.signature === "") {
    return Either.left(new ManifestUnsigned({ reason: parsed.keyId === undefined || parsed.keyId === "" ? "no key id" : "no signature" }))
  }
  if (typeof parsed.keyId !== "string" || !Schema.is(Manifest.KeyId)(parsed.keyId)) {
    return Either.left(new UnknownKey({ keyId: quote(parsed.keyId) }))
  }
  const keyId = parsed.keyId
  const key = trusted.get(keyId)
  if (key === undefined) return Either.left(new UnknownKey({ keyId }))
  if (typeof parsed.signature !== "string" || !/^[A-Za-z0-9+/]{86}==$/.test(parsed.signature)) {
    return Either.left(new BadSignature({ keyId }))
  }
  const signature = Buffer.from(parsed.signature, "base64")
  let payload: Buffer
  try {
    payload = Manifest.signingPayload(parsed.manifest)
  } catch {
    return Either.left(new BadSignature({ keyId }))
  }
  if (signature.length !== 64 || !Crypto.verify(null, payload, key.publicKey, signature)) {
    return Either.left(new BadSignature({ keyId }))
  }
  if (extra.length > 0) return Either.left(new InvalidManifest({ reason: `unknown envelope fields: ${extra.join(", ")}` }))
  const decoded = Manifest.decodeManifest(parsed.manifest)
  if (Either.isLeft(decoded)) {
    return Either.left(new InvalidManifest({ reason: ParseResult.TreeFormatter.formatErrorSync(decoded.left) }))
  }
  const { name, role } = decoded.right
  if (key.scope !== undefined && !key.scope.some((s) => s.name === name && s.role === role)) {
    return Either.left(new KeyNotAllowed({ keyId, model: name, role, allowed: describeScope(key.scope) }))
  }
  const envelope = Buffer.from(Manifest.canonicalJson({ keyId, manifest: parsed.manifest, signature: parsed.signature }), "utf8")
  return Either.right({ manifest: decoded.right, keyId, digest: Manifest.digestOfEncoded(parsed.manifest), envelope })
}

/** Files written by `generateKeyPair`. */
export interface GeneratedKey {
  readonly keyId: Manifest.KeyId
  /** `<dir>/<hex>.pub`: SPKI PEM, mode 0644; goes into `trustedKeys`. */
  readonly publicKeyPath: string
  /** `<dir>/<hex>.key`: PKCS#8 PEM, mode 0600; keep it out of any package. */
  readonly privateKeyPath: string
}

const writeNew = (path: string, text: string, mode: number) =>
  Effect.acquireUseRelease(
    Fs.open(path, Fs.O_WRONLY | Fs.O_CREAT | Fs.O_EXCL | Fs.O_NOFOLLOW, mode),
    (fd) => Fs.writeAll(fd, path, Buffer.from(text, "utf8")).pipe(Effect.zipRight(Fs.fsync(fd, path))),
    Fs.closeQuietly
  )

/** Generates an ed25519 key pair into `dir` (created if absent); never overwrites a file. */
export const generateKeyPair = (dir: string) =>
  Effect.gen(function*() {
    const { privateKey, publicKey } = Crypto.generateKeyPairSync("ed25519")
    const keyId = keyIdOf(publicKey)
    const base = keyId.slice("ed25519:".length)
    yield* Fs.mkdirRecursive(dir)
    const publicKeyPath = Path.join(dir, `${base}.pub`)
    const privateKeyPath = Path.join(dir, `${base}.key`)
    yield* writeNew(privateKeyPath, privateKey.export({ type: "pkcs8", format: "pem" }).toString(), 0o600)
    yield* writeNew(publicKeyPath, publicKey.export({ type: "spki", format: "pem" }).toString(), 0o644)
    yield* Fs.fsyncDir(dir)
    return { keyId, publicKeyPath, privateKeyPath } satisfies GeneratedKey
  }).pipe(Effect.mapError(Fs.toStoreError))
