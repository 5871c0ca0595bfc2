/**
 * This process's reader leases: a lease file held for a scope (`pin`), and `lease`, reference
 * counted within the process (one file and one verification per blob while any holder remains).
 * While a lease is held, by any process, reaping keeps the blob.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as RcMap from "effect/RcMap"
import type * as Digest from "../../domain/Digest.js"
import { ArtifactMissing } from "../StoreError.js"
import * as Blobs from "./Blobs.js"
import type { Parts } from "./Parts.js"

/** A held reader lease. */
export interface Lease {
  readonly digest: Digest.Digest
  readonly path: string
  readonly size: number
}

/** A lease file for `digest`, present or not, held for the scope. */
export const pin = (parts: Parts, digest: Digest.Digest) =>
  Effect.acquireRelease(
    parts.withLock(parts.leases.create(digest)),
    (file) =>
      parts.withLock(parts.leases.remove(file)).pipe(
        Effect.catchAll((e) =>
          Effect.logWarning("store: could not remove lease file").pipe(
            Effect.annotateLogs({ service: "Store", path: file.path, error: e.message })
          )
        )
      )
  )

/**
 * The process's lease map, for the store's scope. A blob is verified on first lease (and again
 * whenever its identity changed); a failed lookup is not cached.
 */
export const make = (parts: Parts) =>
  Effect.gen(function*() {
    const leaseMap = yield* RcMap.make({
      lookup: (digest: Digest.Digest) =>
        Effect.gen(function*() {
          const present = yield* parts.blobs.statOf(digest)
          if (Option.isNone(present)) return yield* Effect.fail(new ArtifactMissing({ digest }))
          yield* pin(parts, digest)
          const blob = yield* parts.blobs.verify(digest, { trustIdentity: true })
          return { digest, path: blob.path, size: blob.size } satisfies Lease
        })
    })

    const lease = (digest: string) =>
      Effect.flatMap(Blobs.validateDigest(digest), (d) =>
        RcMap.get(leaseMap, d).pipe(Effect.tapError(() => RcMap.invalidate(leaseMap, d)))).pipe(
          Effect.withSpan("Store.lease", { attributes: { digest } })
        )

    return { lease } as const
  })

/** The process's `lease`. */
export type Leasing = Effect.Effect.Success<ReturnType<typeof make>>
