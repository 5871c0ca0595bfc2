/**
 * Deactivating a model (`store rm`): under the lock, a deactivation line is journaled for the
 * model on a device, hiding every activation of it before that line, in every role they had.
 * Its blobs become collectable by the next reap unless another active manifest names them or a
 * lease holds them (a running server keeps its lease until it restarts). The packaged seed's
 * models are refused: the seed is every role's last resort and would be activated again at the
 * next start.
 */
import * as Effect from "effect/Effect"
import * as Path from "node:path"
import type { Role } from "../../domain/Manifest.js"
import type { Deactivation } from "../../domain/StoreResults.js"
import { InvalidManifest, NotActive, SeedNotRemovable } from "../StoreError.js"
import * as Journal from "./Journal.js"
import { isDevice, type Parts } from "./Parts.js"
import type * as Reap from "./Reap.js"
import * as Seed from "./Seed.js"

export interface DeactivateOptions {
  /** Device to deactivate on. Default: the configured device. */
  readonly device?: string
}

/** The models the seed provides: its manifest files are named `<model>.manifest.json`. */
const seedModels = (dir: string) =>
  Effect.map(
    Seed.manifestFiles(dir),
    (files) => new Set(files.map((file) => Path.basename(file).slice(0, -Seed.manifestSuffix.length)))
  ).pipe(Effect.orElseSucceed(() => new Set<string>()))

export const make = (parts: Parts, reaping: Reap.Reaping) => {
  const { config, journal, withLock } = parts

  const deactivate = Effect.fn("Store.deactivate")(function*(model: string, options?: DeactivateOptions) {
    const device = options?.device ?? config.device
    if (!isDevice(device)) return yield* Effect.fail(new InvalidManifest({ reason: `invalid device name ${JSON.stringify(device)}` }))
    if ((yield* seedModels(config.seed.dir)).has(model)) return yield* Effect.fail(new SeedNotRemovable({ model }))
    return yield* withLock(Effect.gen(function*() {
      const before = yield* journal.read
      const current = before.newest.get(Journal.key(model, device))
      if (current === undefined) return yield* Effect.fail(new NotActive({ selector: `model:${model}`, device }))
      const roles = new Set<Role>()
      for (const indexed of before.entries) {
        const { entry } = indexed
        if (entry.model === model && entry.device === device && !Journal.isHidden(before, indexed)) roles.add(entry.role)
      }
      const kept = (yield* reaping.referencedBy(before)).referenced
      const after = yield* journal.appendDeactivation({ model, device, revision: current.entry.revision })
      const stillKept = (yield* reaping.referencedBy(after)).referenced
      yield* Effect.logInfo("store: deactivated").pipe(
        Effect.annotateLogs({ service: "Store", model, device, revision: current.entry.revision, manifest: current.entry.manifest })
      )
      return {
        model,
        device,
        revision: current.entry.revision,
        manifestDigest: current.entry.manifest,
        roles: [...roles],
        collectable: [...kept].filter((digest) => !stillKept.has(digest)).sort()
      } satisfies Deactivation
    }))
  })

  return { deactivate } as const
}
