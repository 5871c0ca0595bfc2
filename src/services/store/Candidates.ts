/**
 * What is active and what a role may run: the journal's activations for a model or role on a
 * device, newest first, each verified under today's trust with its artifacts found in the store;
 * the unusable ones are passed over (with the refusal), a fault of the store fails. `candidates`
 * adds the seed's models that no activation names.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import type * as Digest from "../../domain/Digest.js"
import type { Role } from "../../domain/Manifest.js"
import type { ActiveArtifact, ActiveModel, ModelRevision, PassedOver } from "../../domain/StoreResults.js"
import {
  ArtifactMissing,
  type BadSignature,
  type InvalidManifest,
  type JournalCorrupt,
  type KeyNotAllowed,
  type ManifestMissing,
  type ManifestTooLarge,
  type ManifestUnsigned,
  NotActive,
  type StoreIoError,
  type UnknownKey,
  type UnsafePath
} from "../StoreError.js"
import * as Journal from "./Journal.js"
import type { Parts } from "./Parts.js"
import * as Seed from "./Seed.js"
import type * as Signing from "./Signing.js"

/** Selects an active manifest by model name or by role. */
export type Selector = { readonly model: string } | { readonly role: Role }

/**
 * What a role may run, one entry per manifest in the order to try: its activations in the journal
 * from the newest (each usable, or passed over with the reason), then the packaged seed's model
 * for the role when no activation names that manifest (staged, not activated: `journalLine` is
 * undefined).
 */
export type Candidate = Either.Either<ModelRevision & { readonly journalLine: number | undefined }, PassedOver>

/** Why one activation cannot be used (it is passed over); anything else is a fault of the store. */
export type UnusableError =
  | ManifestMissing
  | ManifestTooLarge
  | ManifestUnsigned
  | UnknownKey
  | KeyNotAllowed
  | BadSignature
  | InvalidManifest
  | ArtifactMissing

/** A store that cannot be read at all. */
export type StoreFault = JournalCorrupt | UnsafePath | StoreIoError

type Indexed = Journal.Indexed

const unusableTags: ReadonlySet<string> = new Set<UnusableError["_tag"]>([
  "ManifestMissing",
  "ManifestTooLarge",
  "ManifestUnsigned",
  "UnknownKey",
  "KeyNotAllowed",
  "BadSignature",
  "InvalidManifest",
  "ArtifactMissing"
])
const isUnusable = (e: { readonly _tag: string }): e is UnusableError => unusableTags.has(e._tag)

/** An activation passed over, with the refusal that made it unusable. */
const passedOver = (indexed: Indexed, error: UnusableError): PassedOver => ({
  model: indexed.entry.model,
  role: indexed.entry.role,
  device: indexed.entry.device,
  revision: indexed.entry.revision,
  manifestDigest: indexed.entry.manifest,
  journalLine: indexed.line,
  error: error._tag,
  reason: error.message
})

/**
 * The journal's activations for a selector on a device, newest first, each manifest once; those a
 * later deactivation of their model hides are left out.
 */
const activationsOf = (state: Journal.State, selector: Selector, device: string): Array<Indexed> => {
  const seen = new Set<string>()
  const found: Array<Indexed> = []
  for (let i = state.entries.length - 1; i >= 0; i--) {
    const indexed = state.entries[i]!
    const { entry } = indexed
    if (entry.device !== device || seen.has(entry.manifest) || Journal.isHidden(state, indexed)) continue
    if ("model" in selector ? entry.model !== selector.model : entry.role !== selector.role) continue
    seen.add(entry.manifest)
    found.push(indexed)
  }
  return found
}

/** Logs each activation passed over (the newer ones before the one used). */
const warnPassedOver = (skipped: ReadonlyArray<{ readonly indexed: Indexed; readonly error: UnusableError }>) =>
  Effect.forEach(skipped, ({ error, indexed }) =>
    Effect.logWarning("store: activation passed over").pipe(
      Effect.annotateLogs({
        service: "Store",
        model: indexed.entry.model,
        revision: indexed.entry.revision,
        manifest: indexed.entry.manifest,
        journalLine: indexed.line,
        reason: error.message
      })
    ), { discard: true })

export const make = (parts: Parts) => {
  const { blobs, config, manifests, trusted, withLock, journal } = parts

  /** A verified manifest with its artifacts found in the store. */
  const describeVerified = (verified: Signing.Verified, device: string) =>
    Effect.gen(function*() {
      const artifacts: Array<ActiveArtifact> = []
      for (const artifact of verified.manifest.artifacts) {
        const st = yield* blobs.statOf(artifact.digest)
        if (Option.isNone(st) || !st.value.isFile()) return yield* Effect.fail(new ArtifactMissing({ digest: artifact.digest }))
        artifacts.push({ digest: artifact.digest, size: artifact.size, mediaType: artifact.mediaType, path: blobs.pathOf(artifact.digest) })
      }
      return {
        model: verified.manifest.name,
        role: verified.manifest.role,
        device,
        revision: verified.manifest.revision,
        manifestDigest: verified.digest,
        keyId: verified.keyId,
        manifest: verified.manifest,
        artifacts
      } satisfies ModelRevision
    })

  /** Verifies a stored manifest under today's trust and finds its artifacts. */
  const describeManifest = (digest: Digest.Digest, device: string) =>
    Effect.flatMap(manifests.readVerified(digest, trusted), (verified) => describeVerified(verified, device))

  /** An activation described, or the refusal that makes it unusable; a fault of the store fails. */
  const tryDescribe = (indexed: Indexed): Effect.Effect<Either.Either<ActiveModel, UnusableError>, StoreFault> =>
    describeManifest(indexed.entry.manifest, indexed.entry.device).pipe(
      Effect.map((model): Either.Either<ActiveModel, UnusableError> =>
        Either.right({ ...model, activatedAt: indexed.entry.at, journalLine: indexed.line })
      ),
      Effect.catchIf(isUnusable, (e) => Effect.succeed(Either.left(e)))
    )

  /** The newest usable activation for a selector, and the newer ones passed over on the way. */
  const firstUsable = (state: Journal.State, selector: Selector, device: string) =>
    Effect.gen(function*() {
      const skipped: Array<{ readonly indexed: Indexed; readonly error: UnusableError }> = []
      for (const indexed of activationsOf(state, selector, device)) {
        const described = yield* tryDescribe(indexed)
        if (Either.isRight(described)) return { found: Option.some(described.right), skipped }
        skipped.push({ indexed, error: described.left })
      }
      return { found: Option.none<ActiveModel>(), skipped }
    })

  const active = Effect.fn("Store.active")(function*(selector: Selector, device?: string) {
    const dev = device ?? config.device
    const state = yield* withLock(journal.read)
    const { found, skipped } = yield* firstUsable(state, selector, dev)
    yield* warnPassedOver(skipped)
    if (Option.isSome(found)) return found.value
    const newest = skipped[0]
    if (newest !== undefined) return yield* Effect.fail(newest.error)
    return yield* Effect.fail(
      new NotActive({ selector: "model" in selector ? `model:${selector.model}` : `role:${selector.role}`, device: dev })
    )
  })

  /**
   * The seed's manifests, each verified under today's trust (its key, scoped to its models); none
   * when the seed cannot be read (it is a last resort, not a requirement).
   */
  const seedManifests = Effect.flatMap(Seed.manifestFiles(config.seed.dir), (files) =>
    Effect.forEach(files, (file) => Effect.map(Seed.readManifest(file, config.maxManifestBytes), parts.readSigned))).pipe(
      Effect.catchAll((e) =>
        Effect.as(
          Effect.logWarning("store: the seed cannot be read").pipe(Effect.annotateLogs({ service: "Store", reason: e.message })),
          []
        )
      )
    )

  const candidates = Effect.fn("Store.candidates")(function*(role: Role, device?: string) {
    const dev = device ?? config.device
    const state = yield* withLock(journal.read)
    const result: Array<Candidate> = []
    for (const indexed of activationsOf(state, { role }, dev)) {
      const described = yield* tryDescribe(indexed)
      result.push(Either.isRight(described) ? Either.right(described.right) : Either.left(passedOver(indexed, described.left)))
    }
    // A seed manifest whose activation was passed over (the seed was re-signed) is a candidate again.
    const named = new Set(result.flatMap((c) => Either.isRight(c) ? [c.right.manifestDigest] : []))
    for (const seed of yield* seedManifests) {
      if (Either.isLeft(seed)) continue
      const { digest, manifest } = seed.right
      if (manifest.role !== role || named.has(digest)) continue
      // The seed's artifacts are in the store once importSeed has run; without them it is no candidate.
      const described = yield* describeVerified(seed.right, dev).pipe(
        Effect.map(Option.some),
        Effect.catchTag("ArtifactMissing", () => Effect.succeed(Option.none()))
      )
      if (Option.isSome(described)) result.push(Either.right({ ...described.value, journalLine: undefined }))
    }
    return result
  })

  /** Per (model, device), the newest usable activation, and the newer ones passed over. */
  const activePerModel = (state: Journal.State) =>
    Effect.gen(function*() {
      const activeModels: Array<ActiveModel> = []
      const skipped: Array<PassedOver> = []
      for (const newest of state.newest.values()) {
        const { entry } = newest
        const { found, skipped: newer } = yield* firstUsable(state, { model: entry.model }, entry.device)
        if (Option.isSome(found)) activeModels.push(found.value)
        skipped.push(...newer.map(({ error, indexed }) => passedOver(indexed, error)))
      }
      return {
        active: activeModels.sort((a, b) => a.journalLine - b.journalLine),
        passedOver: skipped.sort((a, b) => a.journalLine - b.journalLine)
      }
    })

  return { active, candidates, activePerModel } as const
}

/** What the store reads as active; reaping keeps the artifacts of `activePerModel`. */
export type Reading = ReturnType<typeof make>
