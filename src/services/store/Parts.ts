/**
 * An open store: the record every part of the store (staging, leases, activation, candidates,
 * reaping, listing, the seed import) works through. Opening checks the root, takes the lock file,
 * reads the trusted keys, opens the journal (its state is read once, so a corrupt journal fails
 * here) and clears stale staging files. One record per store, so the parts share one lock, one
 * journal state and one set of keys.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import type { InvalidKey, JournalCorrupt, StoreIoError, UnsafePath } from "../StoreError.js"
import * as Blobs from "./Blobs.js"
import * as Fs from "./Fs.js"
import * as Journal from "./Journal.js"
import * as Leases from "./Leases.js"
import * as Lock from "./Lock.js"
import * as Manifests from "./Manifests.js"
import * as SafePath from "./SafePath.js"
import type { StoreConfigShape } from "./StoreConfig.js"
import * as Trust from "./Trust.js"

export interface Parts {
  readonly config: StoreConfigShape
  /** The store root (real path). */
  readonly root: string
  /** Runs an effect holding the store's exclusive cross-process lock. */
  readonly withLock: <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.Effect<A, Exclude<E, Fs.FsError> | UnsafePath | StoreIoError, R>
  readonly trusted: Trust.TrustedKeys
  /** Verifies a signed manifest under the trusted keys. */
  readonly readSigned: ReturnType<typeof Trust.readSigned>
  readonly journal: Journal.Journal
  readonly blobs: Blobs.Blobs
  readonly leases: ReturnType<typeof Leases.make>
  readonly manifests: ReturnType<typeof Manifests.make>
}

export const isDevice = Schema.is(Journal.DeviceName)

/** Opens the store at `config.root` for the scope. Dies on an invalid default device (a programming error). */
export const open = (
  config: StoreConfigShape
): Effect.Effect<Parts, UnsafePath | StoreIoError | InvalidKey | JournalCorrupt, Scope.Scope> =>
  Effect.gen(function*() {
    if (!isDevice(config.device)) return yield* Effect.dieMessage(`invalid default device ${JSON.stringify(config.device)}`)
    const root = yield* Fs.orStoreError(SafePath.prepareRoot(config.root))
    const lock = yield* Fs.orStoreError(Lock.make(root))
    const withLock = <A, E, R>(self: Effect.Effect<A, E, R>) => Fs.orStoreError(lock.withLock(self))
    const trusted = yield* Trust.trustedKeys(config)
    const journal = yield* Journal.make(root)
    const blobs = Blobs.make(root, lock)
    yield* withLock(journal.read)
    yield* blobs.cleanStaging
    return {
      config,
      root,
      withLock,
      trusted,
      readSigned: Trust.readSigned(trusted, config.maxManifestBytes),
      journal,
      blobs,
      leases: Leases.make(root),
      manifests: Manifests.make(root, config.maxManifestBytes)
    } satisfies Parts
  })
