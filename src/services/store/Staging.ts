/**
 * Bringing bytes into the store: `stage` (a file or byte stream copied under its expected digest,
 * its declared size enforced while copying), `stageLeased` (the same, holding a lease taken before
 * publishing, so no reap collects the blob before it is activated) and `verify` (re-hashing a
 * published blob).
 */
import * as Effect from "effect/Effect"
import * as Blobs from "./Blobs.js"
import type { Parts } from "./Parts.js"
import * as ReaderLeases from "./ReaderLeases.js"

export interface StageOptions {
  /** Called at most every 100 ms while copying, and once at the end. */
  readonly onProgress?: (progress: Blobs.Progress) => Effect.Effect<void>
}

export const make = (parts: Parts) => {
  const { blobs } = parts

  const stage = <E = never>(source: Blobs.StageSource<E>, expectedDigest: string, declaredSize: number, options?: StageOptions) =>
    Blobs.validateDigest(expectedDigest).pipe(
      Effect.flatMap((digest) => blobs.stage(source, digest, declaredSize, options?.onProgress)),
      Effect.withSpan("Store.stage", { attributes: { digest: expectedDigest, size: declaredSize } })
    )

  const stageLeased = <E = never>(source: Blobs.StageSource<E>, expectedDigest: string, declaredSize: number, options?: StageOptions) =>
    Effect.gen(function*() {
      const digest = yield* Blobs.validateDigest(expectedDigest)
      yield* ReaderLeases.pin(parts, digest)
      const path = yield* blobs.stage(source, digest, declaredSize, options?.onProgress)
      return { digest, path, size: declaredSize } satisfies ReaderLeases.Lease
    }).pipe(Effect.withSpan("Store.stageLeased", { attributes: { digest: expectedDigest, size: declaredSize } }))

  const verify = Effect.fn("Store.verify")(function*(digest: string) {
    return yield* blobs.verify(yield* Blobs.validateDigest(digest))
  })

  return { stage, stageLeased, verify } as const
}

export type Staging = ReturnType<typeof make>
