/**
 * Activating a signed manifest: its expiry, every artifact it names verified (a GGUF one's header
 * read), then, under the lock, "already active", an optional hold-back and the revision rule
 * checked again against the journal before it is appended. The same manifest offered again under
 * a key trusted today replaces a stored envelope that no longer verifies.
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as NodeFs from "node:fs"
import * as Digest from "../../domain/Digest.js"
import * as GgufHeader from "../../domain/GgufHeader.js"
import { ggufMediaType, type SignedManifest } from "../../domain/Manifest.js"
import type { Activation } from "../../domain/StoreResults.js"
import {
  ArtifactMissing,
  InvalidManifest,
  InvalidModelFile,
  ManifestExpired,
  RollbackRefused,
  StoreIoError
} from "../StoreError.js"
import * as Blobs from "./Blobs.js"
import * as Fs from "./Fs.js"
import * as Journal from "./Journal.js"
import { isDevice, type Parts } from "./Parts.js"
import * as SafePath from "./SafePath.js"
import type * as Signing from "./Signing.js"

export interface ActivateOptions {
  /** Device to activate on. Default: the configured device. */
  readonly device?: string
  /** Permit a revision not newer than the active one. Default false. */
  readonly allowRollback?: boolean
}

const checkDevice = (device: string) =>
  isDevice(device) ? Effect.succeed(device) : Effect.fail(new InvalidManifest({ reason: `invalid device name ${JSON.stringify(device)}` }))

/**
 * Refuses a revision not newer than the active one of the model (unless allowed). After a
 * deactivation, the revision it removed may come back, an older one is a rollback.
 */
const checkRevision = (state: Journal.State, verified: Signing.Verified, device: string, allowRollback: boolean) => {
  const k = Journal.key(verified.manifest.name, device)
  const current = state.newest.get(k)
  const removed = current === undefined ? state.deactivated.get(k) : undefined
  const refused = current !== undefined
    ? current.entry.revision >= verified.manifest.revision
    : removed !== undefined && removed.entry.revision > verified.manifest.revision
  const active = current?.entry.revision ?? removed?.entry.revision
  if (refused && active !== undefined && !allowRollback) {
    return Effect.fail(
      new RollbackRefused({ model: verified.manifest.name, device, active, offered: verified.manifest.revision })
    )
  }
  return Effect.void
}

const activation = (verified: Signing.Verified, device: string, alreadyActive: boolean): Activation => ({
  model: verified.manifest.name,
  role: verified.manifest.role,
  device,
  revision: verified.manifest.revision,
  manifestDigest: verified.digest,
  keyId: verified.keyId,
  alreadyActive
})

export const make = (parts: Parts) => {
  const { blobs, config, journal, manifests, root, trusted, withLock } = parts

  /** Reads a GGUF artifact's header through a descriptor checked to be the verified blob. */
  const checkModelFile = (blob: Blobs.VerifiedBlob) =>
    Effect.scoped(Effect.gen(function*() {
      const file = yield* SafePath.openRead(root, Blobs.segmentsOf(blob.digest), Digest.hex(blob.digest))
      if (file.stat.ino !== blob.ino || file.stat.dev !== blob.dev) return yield* Effect.fail(new ArtifactMissing({ digest: blob.digest }))
      const header = yield* Effect.try({
        try: () =>
          GgufHeader.read((position, length) => {
            const buffer = Buffer.allocUnsafe(length)
            return buffer.subarray(0, NodeFs.readSync(file.fd, buffer, 0, length, position))
          }, Number(file.stat.size)),
        catch: (cause) => new StoreIoError({ operation: "read model header", path: file.path, cause })
      })
      if (Either.isLeft(header)) {
        return yield* Effect.fail(new InvalidModelFile({ digest: blob.digest, reason: header.left.reason, offset: header.left.offset }))
      }
      return header.right
    })).pipe(Fs.orStoreError)

  /**
   * The same manifest (same digest) offered again under a key trusted today: when the stored
   * envelope no longer verifies (its signer was removed, or the seed was re-signed), the offered
   * one replaces it, so the activation is usable again. Call under the lock.
   */
  const refreshEnvelope = (verified: Signing.Verified) =>
    Effect.flatMap(Effect.either(manifests.readVerified(verified.digest, trusted)), (stored) =>
      Either.isRight(stored)
        ? Effect.void
        : Effect.zipRight(
          manifests.write(verified.digest, verified.envelope),
          Effect.logInfo("store: stored manifest re-signed").pipe(
            Effect.annotateLogs({ service: "Store", manifest: verified.digest, keyId: verified.keyId, was: stored.left.message })
          )
        ))

  /**
   * Activates a verified manifest: the artifacts are verified (a GGUF one's header checked), then,
   * under the lock, the revision rule is applied and the journal appended. `holdBack` (checked
   * under the same lock, after "already active") may keep it from being activated, with a reason.
   */
  const activateVerified = (
    verified: Signing.Verified,
    device: string,
    allowRollback: boolean,
    holdBack: (state: Journal.State) => string | undefined = () => undefined
  ) =>
    Effect.gen(function*() {
      const manifest = verified.manifest
      if (manifest.expiresAt !== undefined) {
        const now = yield* Clock.currentTimeMillis
        if (manifest.expiresAt.getTime() <= now) {
          return yield* Effect.fail(
            new ManifestExpired({
              model: manifest.name,
              revision: manifest.revision,
              expiresAt: manifest.expiresAt.toISOString(),
              now: new Date(now).toISOString()
            })
          )
        }
      }
      type Outcome = Either.Either<Activation, string>
      /** Already active, held back, or none of these (then the rollback rule has been applied). */
      const settled = (state: Journal.State) =>
        Effect.gen(function*() {
          const current = state.newest.get(Journal.key(manifest.name, device))
          if (current !== undefined && current.entry.manifest === verified.digest) {
            yield* refreshEnvelope(verified)
            return Option.some<Outcome>(Either.right(activation(verified, device, true)))
          }
          const reason = holdBack(state)
          if (reason !== undefined) return Option.some<Outcome>(Either.left(reason))
          yield* checkRevision(state, verified, device, allowRollback)
          return Option.none<Outcome>()
        })
      const early = yield* withLock(Effect.flatMap(journal.read, settled))
      if (Option.isSome(early)) return early.value
      const checked: Array<Blobs.VerifiedBlob> = []
      for (const artifact of manifest.artifacts) {
        const blob = yield* blobs.verify(artifact.digest, { trustIdentity: true })
        if (blob.size !== artifact.size) {
          return yield* Effect.fail(
            new InvalidManifest({ reason: `artifact ${artifact.digest} is ${blob.size} bytes, the manifest says ${artifact.size}` })
          )
        }
        if (artifact.mediaType === ggufMediaType) yield* checkModelFile(blob)
        checked.push(blob)
      }
      return yield* withLock(Effect.gen(function*() {
        const state = yield* journal.read
        const late = yield* settled(state)
        if (Option.isSome(late)) return late.value
        for (const blob of checked) {
          const now = yield* blobs.statOf(blob.digest)
          if (Option.isNone(now) || now.value.ino !== blob.ino || now.value.dev !== blob.dev) {
            return yield* Effect.fail(new ArtifactMissing({ digest: blob.digest }))
          }
        }
        yield* manifests.write(verified.digest, verified.envelope)
        yield* journal.append({
          model: manifest.name,
          role: manifest.role,
          device,
          manifest: verified.digest,
          revision: manifest.revision
        })
        yield* Effect.logInfo("store: activated").pipe(
          Effect.annotateLogs({ service: "Store", model: manifest.name, device, revision: manifest.revision, manifest: verified.digest })
        )
        const activated: Outcome = Either.right(activation(verified, device, false))
        return activated
      }))
    })

  const activate = Effect.fn("Store.activate")(function*(
    signed: SignedManifest | string | Uint8Array,
    options?: ActivateOptions
  ) {
    const device = yield* checkDevice(options?.device ?? config.device)
    const verified = yield* parts.readSigned(signed)
    const result = yield* activateVerified(verified, device, options?.allowRollback === true)
    return yield* Either.match(result, {
      onLeft: (reason) => Effect.die(new Error(`store bug: an activation without a guard was held back (${reason})`)),
      onRight: Effect.succeed
    })
  })

  return { activateVerified, activate } as const
}

export type Activating = ReturnType<typeof make>
