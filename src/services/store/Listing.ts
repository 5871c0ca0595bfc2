/**
 * The store's listing: the active manifests (per model, the newest usable), the activations passed
 * over, and every published blob with whether reaping keeps it and whether a lease holds it.
 */
import * as Effect from "effect/Effect"
import * as Digest from "../../domain/Digest.js"
import type { Listing } from "../../domain/StoreResults.js"
import type { Parts } from "./Parts.js"
import type * as Reap from "./Reap.js"

export const make = (parts: Parts, reaping: Reap.Reaping) => {
  const { blobs, journal, leases, withLock } = parts
  const { referencedBy } = reaping

  const list = Effect.gen(function*() {
    const { models, referenced, scan } = yield* withLock(Effect.gen(function*() {
      const { models, referenced } = yield* referencedBy(yield* journal.read)
      return { models, referenced, scan: yield* leases.scan }
    }))
    const all = yield* blobs.list
    return {
      active: models.active,
      passedOver: models.passedOver,
      blobs: all.map(({ digest, stat }) => ({
        digest,
        size: Number(stat.size),
        referenced: referenced.has(digest),
        leased: scan.held.has(Digest.hex(digest))
      }))
    } satisfies Listing
  }).pipe(Effect.withSpan("Store.list"))

  return list
}
