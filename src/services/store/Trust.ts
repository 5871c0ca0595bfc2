/**
 * The keys trusted to sign manifests, and reading a signed manifest under them. The seed's key may
 * sign only the seed's own models (its scope); a key the configuration names is trusted for
 * everything, even when it is the seed's.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type { SignedManifest } from "../../domain/Manifest.js"
import type { InvalidKey } from "../StoreError.js"
import * as Seed from "./Seed.js"
import * as Signing from "./Signing.js"
import type { StoreConfigShape } from "./StoreConfig.js"

export type TrustedKeys = ReadonlyMap<string, Signing.TrustedKey>

/** The seed's key (when trusted and readable: a seed without one only logs) and the configured keys. */
export const trustedKeys = (config: StoreConfigShape): Effect.Effect<TrustedKeys, InvalidKey> =>
  Effect.gen(function*() {
    const trusted = new Map<string, Signing.TrustedKey>()
    if (config.trustSeedKey) {
      const seedKey = yield* Effect.either(Seed.scopedKey(config.seed.dir, config.maxManifestBytes))
      if (Either.isRight(seedKey)) trusted.set(seedKey.right.keyId, seedKey.right)
      else yield* Effect.logWarning("store: no seed key").pipe(Effect.annotateLogs({ service: "Store", reason: seedKey.left.message }))
    }
    for (const [i, pem] of config.trustedKeys.entries()) {
      const key = yield* Either.match(Signing.publicKeyFromPem(pem, `trustedKeys[${i}]`), {
        onLeft: Effect.fail,
        onRight: Effect.succeed
      })
      trusted.set(key.keyId, key)
    }
    return trusted
  })

/** Verifies a signed manifest (an object, or its JSON text or bytes, size-checked before parsing). */
export const readSigned = (trusted: TrustedKeys, maxManifestBytes: number) => (signed: SignedManifest | string | Uint8Array) => {
  const bytes = typeof signed === "string"
    ? Buffer.from(signed, "utf8")
    : signed instanceof Uint8Array
    ? signed
    : Buffer.from(Signing.envelopeText(signed), "utf8")
  return Signing.readEnvelope(bytes, trusted, maxManifestBytes)
}
