/**
 * Importing the seed: every seed artifact is verified (regenerated and staged when absent or
 * corrupt) and held by a lease; a seed manifest is then activated only when its role has no
 * activation of any other model on the default device and no newer revision of it is active,
 * otherwise it stays staged, with the reason.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Crypto from "node:crypto"
import type * as Digest from "../../domain/Digest.js"
import type { Manifest, Role } from "../../domain/Manifest.js"
import type { Activation } from "../../domain/StoreResults.js"
import type * as Activating from "./Activation.js"
import * as Blobs from "./Blobs.js"
import * as Dir from "./Dir.js"
import * as Fs from "./Fs.js"
import * as Journal from "./Journal.js"
import * as Owner from "./Owner.js"
import type { Parts } from "./Parts.js"
import type * as ReaderLeases from "./ReaderLeases.js"
import * as Seed from "./Seed.js"
import type * as Staging from "./Staging.js"

export interface SeedReport {
  /** Seed models activated now or already active. */
  readonly models: ReadonlyArray<Activation>
  /**
   * Seed models staged (their artifacts verified in the store) but not activated: their role has
   * an activation of another model, or a newer revision of the seed model is active.
   */
  readonly staged: ReadonlyArray<{
    readonly model: string
    readonly role: Role
    readonly revision: number
    readonly manifestDigest: Digest.Digest
    readonly reason: string
  }>
}

export const make = (
  parts: Parts,
  { activateVerified, lease, stageLeased }: {
    readonly lease: ReaderLeases.Leasing["lease"]
    readonly stageLeased: Staging.Staging["stageLeased"]
    readonly activateVerified: Activating.Activating["activateVerified"]
  }
) => {
  const { blobs, config, readSigned, root } = parts

  const owner = Owner.format(Owner.self())

  /**
   * Holds a lease on a seed artifact for the scope. A present blob is verified by the lease; an
   * absent or corrupt one (quarantined by that verification) is regenerated and staged.
   */
  const importSeedArtifact = (digest: Digest.Digest, size: number, model: string) =>
    Effect.gen(function*() {
      const present = yield* blobs.statOf(digest)
      if (Option.isSome(present) && present.value.isFile() && Number(present.value.size) === size) {
        const leased = yield* lease(digest).pipe(
          Effect.as(true),
          Effect.catchTags({ ArtifactCorrupt: () => Effect.succeed(false), ArtifactMissing: () => Effect.succeed(false) })
        )
        if (leased) return
      }
      // Written and removed through the opened staging directory, never by a path that a swapped
      // directory could redirect outside the store.
      const staging = yield* Fs.orStoreError(Dir.open(root, [Blobs.stagingDir], true))
      const name = `${owner}.${Crypto.randomBytes(6).toString("hex")}.seed`
      const temp = Dir.at(staging, name)
      yield* Effect.acquireUseRelease(
        Effect.as(config.seed.materialize(model, temp), temp),
        () => stageLeased(temp, digest, size),
        () => Effect.ignore(Dir.unlink(staging, name))
      )
    })

  /**
   * Why a seed manifest stays staged: its role has (on the default device) an activation of
   * another model, not since deactivated: the user's choice, which a package upgrade must not replace.
   */
  const seedHeldBack = (manifest: Manifest) => (state: Journal.State): string | undefined => {
    for (let i = state.entries.length - 1; i >= 0; i--) {
      const indexed = state.entries[i]!
      const { entry, line } = indexed
      if (Journal.isHidden(state, indexed)) continue
      if (entry.role === manifest.role && entry.device === config.device && entry.model !== manifest.name) {
        return `${manifest.role} has an activation of ${entry.model} (revision ${entry.revision}, journal line ${line})`
      }
    }
    return undefined
  }

  const importSeed = Effect.gen(function*() {
    const models: Array<Activation> = []
    const staged: Array<SeedReport["staged"][number]> = []
    for (const file of yield* Seed.manifestFiles(config.seed.dir)) {
      const verified = yield* readSigned(yield* Seed.readManifest(file, config.maxManifestBytes))
      const manifest = verified.manifest
      const result = yield* Effect.scoped(Effect.gen(function*() {
        for (const artifact of manifest.artifacts) {
          yield* importSeedArtifact(artifact.digest, artifact.size, manifest.name)
        }
        return yield* activateVerified(verified, config.device, false, seedHeldBack(manifest)).pipe(
          Effect.catchTag("RollbackRefused", (e): Effect.Effect<Either.Either<Activation, string>> => Effect.succeed(Either.left(e.message)))
        )
      }))
      if (Either.isRight(result)) {
        models.push(result.right)
        continue
      }
      staged.push({ model: manifest.name, role: manifest.role, revision: manifest.revision, manifestDigest: verified.digest, reason: result.left })
      yield* Effect.logInfo("store: seed staged, not activated").pipe(
        Effect.annotateLogs({ service: "Store", model: manifest.name, revision: manifest.revision, reason: result.left })
      )
    }
    return { models, staged } satisfies SeedReport
  }).pipe(Effect.withSpan("Store.importSeed"))

  return importSeed
}
