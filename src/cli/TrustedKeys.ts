/**
 * The directory of public keys `nativegen serve` trusts to sign manifests, besides the seed's key
 * (default `$XDG_CONFIG_HOME/nativegen/trusted-keys`, one PEM `*.pub` per key, like SSH's
 * authorized keys). Since whoever can write there can make the server accept any model, the
 * directory and its files must belong to this user and be writable by nobody else; a key that
 * does not parse fails the start rather than being skipped.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Fs from "node:fs"
import * as Path from "node:path"
import type { KeyId } from "../domain/Manifest.js"
import * as Signing from "../services/store/Signing.js"
import { CliFileError, reasonOf } from "./CliError.js"

const fail = (path: string, reason: string) => Effect.fail(new CliFileError({ path, reason }))

const checkOwned = (path: string, stat: Fs.Stats, kind: string) => {
  const uid = process.getuid?.()
  if (uid !== undefined && stat.uid !== uid) return fail(path, `the trusted ${kind} belongs to uid ${stat.uid}, not to this user`)
  if ((stat.mode & 0o022) !== 0) {
    return fail(path, `the trusted ${kind} is writable by others (mode ${(stat.mode & 0o777).toString(8).padStart(4, "0")})`)
  }
  return Effect.void
}

const attempt = <A>(path: string, f: () => A) =>
  Effect.try({ try: f, catch: (cause) => new CliFileError({ path, reason: reasonOf(cause) }) })

export interface TrustedKey {
  readonly keyId: KeyId
  readonly path: string
  readonly pem: string
}

/** The keys in `dir` (none when it does not exist), each checked and parsed. */
export const load = (dir: string): Effect.Effect<ReadonlyArray<TrustedKey>, CliFileError> =>
  Effect.gen(function*() {
    if (!Fs.existsSync(dir)) return []
    const stat = yield* attempt(dir, () => Fs.lstatSync(dir))
    if (!stat.isDirectory()) return yield* fail(dir, "the trusted keys directory is not a directory")
    yield* checkOwned(dir, stat, "keys directory")
    const names = yield* attempt(dir, () => Fs.readdirSync(dir).filter((name) => name.endsWith(".pub")).sort())
    return yield* Effect.forEach(names, (name) =>
      Effect.gen(function*() {
        const path = Path.join(dir, name)
        const file = yield* attempt(path, () => Fs.lstatSync(path))
        if (!file.isFile()) return yield* fail(path, "a trusted key must be a regular file")
        yield* checkOwned(path, file, "key")
        const pem = yield* attempt(path, () => Fs.readFileSync(path, "utf8"))
        const key = Signing.publicKeyFromPem(pem, path)
        if (Either.isLeft(key)) return yield* fail(path, key.left.message)
        return { keyId: key.right.keyId, path, pem }
      }))
  })

/** Copies a public key into `dir` (created 0700) as `<key id hex>.pub`; says whether it was already there. */
export const trust = (publicKeyPath: string, dir: string) =>
  Effect.gen(function*() {
    const pem = yield* attempt(publicKeyPath, () => Fs.readFileSync(publicKeyPath, "utf8"))
    const key = Signing.publicKeyFromPem(pem, publicKeyPath)
    if (Either.isLeft(key)) return yield* fail(publicKeyPath, key.left.message)
    const keyId = key.right.keyId
    const target = Path.join(dir, `${keyId.slice("ed25519:".length)}.pub`)
    yield* attempt(dir, () => Fs.mkdirSync(dir, { recursive: true, mode: 0o700 }))
    const existing = yield* load(dir)
    if (existing.some((k) => k.keyId === keyId)) return { keyId, path: target, alreadyTrusted: true }
    yield* attempt(target, () => Fs.writeFileSync(target, pem, { flag: "wx", mode: 0o644 }))
    return { keyId, path: target, alreadyTrusted: false }
  })
