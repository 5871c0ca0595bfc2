/**
 * Reaping: what the store keeps (the artifacts of each model's newest activation, read without
 * checking signatures, and of each model's newest usable one), and removing the blobs that nothing
 * keeps, no live lease holds and that are older than the grace; stale lease and staging files go
 * with them.
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Digest from "../../domain/Digest.js"
import type { ReapReport } from "../../domain/StoreResults.js"
import type * as Candidates from "./Candidates.js"
import type * as Journal from "./Journal.js"
import type { Parts } from "./Parts.js"

export const make = (parts: Parts, reading: Candidates.Reading) => {
  const { blobs, config, journal, leases, manifests, withLock } = parts
  const { activePerModel } = reading

  /**
   * The artifacts reaping keeps: those of each model's newest activation, read without checking
   * signatures (a key removed from the configuration never makes them look unreferenced), and
   * those of each model's newest usable activation (what runs when the newest is passed over).
   */
  const referencedBy = (state: Journal.State) =>
    Effect.gen(function*() {
      const referenced = new Set<Digest.Digest>()
      for (const indexed of state.newest.values()) {
        const manifest = yield* manifests.readReferenced(indexed.entry.manifest)
        for (const artifact of manifest.artifacts) referenced.add(artifact.digest)
      }
      const models = yield* activePerModel(state)
      for (const model of models.active) for (const artifact of model.artifacts) referenced.add(artifact.digest)
      return { referenced, models }
    })

  const reap = Effect.fn("Store.reap")(function*(options?: { readonly grace?: Duration.DurationInput }) {
    const grace = Duration.toMillis(options?.grace === undefined ? config.reapGrace : Duration.decode(options.grace))
    const now = yield* Clock.currentTimeMillis
    return yield* withLock(Effect.gen(function*() {
      const state = yield* journal.read
      const { referenced } = yield* referencedBy(state)
      const scan = yield* leases.scan
      const removed: Array<Digest.Digest> = []
      const kept: Array<Digest.Digest> = []
      let freedBytes = 0
      for (const { digest, stat } of yield* blobs.list) {
        if (referenced.has(digest)) continue
        const young = grace > 0 && now - Number(stat.mtimeMs) < grace
        if (scan.held.has(Digest.hex(digest)) || young) {
          kept.push(digest)
          continue
        }
        if (yield* blobs.remove(digest, stat.ino)) {
          removed.push(digest)
          freedBytes += Number(stat.size)
        }
      }
      const staleStaging = yield* blobs.cleanStaging
      if (removed.length > 0) {
        yield* Effect.logInfo("store: reaped").pipe(Effect.annotateLogs({ service: "Store", removed: removed.length, freedBytes }))
      }
      return { removed, freedBytes, kept, staleLeases: scan.staleRemoved, staleStaging } satisfies ReapReport
    }))
  })

  return { referencedBy, reap } as const
}

export type Reaping = ReturnType<typeof make>
