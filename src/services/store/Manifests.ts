/**
 * Signed manifests kept by the store at `<root>/manifests/sha256/<64 hex>.json`, named by the
 * manifest digest and holding the canonical envelope. Written via staging + fsync + rename +
 * directory fsync before the journal may name them; read back through checked paths and
 * re-verified.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as ParseResult from "effect/ParseResult"
import * as Crypto from "node:crypto"
import * as Path from "node:path"
import * as Digest from "../../domain/Digest.js"
import * as Manifest from "../../domain/Manifest.js"
import {
  InvalidManifest,
  ManifestMissing,
  ManifestTooLarge,
  type StoreIoError,
  type UnsafePath
} from "../StoreError.js"
import { stagingDir } from "./Blobs.js"
import * as Dir from "./Dir.js"
import * as Fs from "./Fs.js"
import * as Owner from "./Owner.js"
import * as SafePath from "./SafePath.js"
import * as Signing from "./Signing.js"

const segments = ["manifests", "sha256"] as const

const nameOf = (digest: Digest.Digest) => `${Digest.hex(digest)}.json`

/** Reads at most `limit` bytes of a file; a larger file fails with `ManifestTooLarge` before parsing. */
export const readLimited = (file: SafePath.OpenFile, limit: number) =>
  Effect.gen(function*() {
    const size = Number(file.stat.size)
    if (size > limit) return yield* Effect.fail(new ManifestTooLarge({ limit, size }))
    const buffer = Buffer.allocUnsafe(limit + 1)
    let got = 0
    for (;;) {
      const n = yield* Fs.read(file.fd, file.path, buffer, got, buffer.length - got, got)
      if (n === 0) break
      got += n
      if (got > limit) return yield* Effect.fail(new ManifestTooLarge({ limit, size: got }))
    }
    return buffer.subarray(0, got)
  })

export const make = (root: string, maxBytes: number) => {
  const owner = Owner.format(Owner.self())

  /** Stores an envelope under its manifest digest (atomic replace). Call under the store lock. */
  const write = (digest: Digest.Digest, envelope: Uint8Array): Effect.Effect<string, UnsafePath | StoreIoError> =>
    Effect.scoped(Effect.gen(function*() {
      const dir = yield* Dir.open(root, segments, true)
      const file = yield* SafePath.createExclusive(root, [stagingDir], `${owner}.${Crypto.randomBytes(6).toString("hex")}.manifest`)
      yield* Fs.writeAll(file.fd, file.path, envelope).pipe(
        Effect.zipRight(Fs.fchmod(file.fd, file.path, 0o444)),
        Effect.zipRight(Fs.fsync(file.fd, file.path)),
        Effect.zipRight(Dir.rename(file.dir, file.name, dir, nameOf(digest))),
        Effect.onError(() => Effect.ignore(Dir.unlink(file.dir, file.name)))
      )
      yield* Dir.fsync(dir)
      return Path.join(dir.path, nameOf(digest))
    })).pipe(Fs.orStoreError)

  const readBytes = (digest: Digest.Digest) =>
    Effect.scoped(Effect.gen(function*() {
      const file = yield* SafePath.openRead(root, segments, nameOf(digest)).pipe(
        Fs.catchCodes(["ENOENT", "ENOTDIR"], () => Effect.fail(new ManifestMissing({ digest })))
      )
      return yield* readLimited(file, maxBytes)
    })).pipe(Fs.orStoreError)

  /** Reads a stored envelope and verifies it against the trusted keys and its digest. */
  const readVerified = (digest: Digest.Digest, trusted: ReadonlyMap<string, Signing.TrustedKey>) =>
    Effect.flatMap(readBytes(digest), (bytes) =>
      Effect.flatMap(Signing.readEnvelope(bytes, trusted, maxBytes), (verified) =>
        verified.digest === digest
          ? Effect.succeed(verified)
          : Effect.fail(new InvalidManifest({ reason: `stored manifest ${digest} hashes to ${verified.digest}` }))))

  /**
   * Reads a stored manifest without checking its signature (it was verified when activated):
   * used by reaping to learn what is referenced, so that a key removed from the configuration
   * can never make referenced artifacts look unreferenced.
   */
  const readReferenced = (digest: Digest.Digest) =>
    Effect.flatMap(readBytes(digest), (bytes) => {
      let parsed: unknown
      try {
        parsed = JSON.parse(Buffer.from(bytes).toString("utf8"))
      } catch {
        return Effect.fail(new InvalidManifest({ reason: `stored manifest ${digest} is not JSON` }))
      }
      const raw = typeof parsed === "object" && parsed !== null && "manifest" in parsed ? parsed.manifest : undefined
      const decoded = Manifest.decodeManifest(raw)
      if (Either.isLeft(decoded)) {
        return Effect.fail(new InvalidManifest({ reason: ParseResult.TreeFormatter.formatErrorSync(decoded.left) }))
      }
      if (Manifest.digestOfEncoded(raw) !== digest) {
        return Effect.fail(new InvalidManifest({ reason: `stored manifest ${digest} does not match its name` }))
      }
      return Effect.succeed(decoded.right)
    })

  return { write, readVerified, readReferenced }
}
