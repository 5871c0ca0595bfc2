/**
 * The packaged seed: `fixtures/seed/` holds `seed.pub` (the public key that signed the seed) and
 * one `<model>.manifest.json` signed envelope per seed model. The model bytes are not shipped:
 * they are produced by the deterministic generator in `fixtures/models.ts` and must hash to the
 * signed digests, so a tampered generator or manifest fails closed. The generator is compiled into
 * the package with the runtime (`dist/fixtures/`) and the manifests ship as they are.
 *
 * The seed's key is trusted only for the seed's own models: its scope is the name and role of
 * each seed manifest that verifies under it and is named after its model (`<name>.manifest.json`),
 * so a leaked seed key cannot sign anything else a default install accepts.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { generateModel, modelSpecs } from "../../../fixtures/models.js"
import * as PackageFiles from "../../internal/PackageFiles.js"
import { InvalidKey, StoreIoError } from "../StoreError.js"
import * as StoreFs from "./Fs.js"
import * as Manifests from "./Manifests.js"
import * as SafePath from "./SafePath.js"
import * as Signing from "./Signing.js"

/** Where a seed comes from. */
export interface SeedSource {
  /** Directory holding `seed.pub` and `*.manifest.json`. */
  readonly dir: string
  /** Writes the bytes of the named seed model to `path`. */
  readonly materialize: (model: string, path: string) => Effect.Effect<void, StoreIoError>
}

export const publicKeyFile = "seed.pub"
export const manifestSuffix = ".manifest.json"

const isModelName = (name: string): name is keyof typeof modelSpecs => Object.hasOwn(modelSpecs, name)

/** Generates a seed model with the project's deterministic generator. */
export const generate = (model: string, path: string): Effect.Effect<void, StoreIoError> =>
  Effect.try({
    try: () => {
      if (!isModelName(model)) throw new Error(`no generator for seed model ${model}`)
      generateModel(modelSpecs[model], path)
    },
    catch: (cause) => new StoreIoError({ operation: "generate seed model", path, cause })
  })

/** The seed shipped with the package (under the package root, whether run from src/ or dist/). */
export const packaged: SeedSource = { dir: PackageFiles.seedDir(), materialize: generate }

/** Reads the seed's public key. */
export const readKey = (dir: string) =>
  Effect.gen(function*() {
    const path = Path.join(dir, publicKeyFile)
    const pem = yield* Effect.try({
      try: () => Fs.readFileSync(path, "utf8"),
      catch: (cause) => new InvalidKey({ source: path, reason: cause instanceof Error ? cause.message : String(cause) })
    })
    return yield* Either.match(Signing.publicKeyFromPem(pem, path), { onLeft: Effect.fail, onRight: Effect.succeed })
  })

/** The seed's manifest files, sorted by name. */
export const manifestFiles = (dir: string) =>
  Effect.try({
    try: () => Fs.readdirSync(dir).filter((name) => name.endsWith(manifestSuffix)).sort().map((name) => Path.join(dir, name)),
    catch: (cause) => new StoreIoError({ operation: "list seed", path: dir, cause })
  })

/** Reads a seed manifest file (size-checked before parsing) through a checked descriptor. */
export const readManifest = (file: string, maxBytes: number) =>
  Effect.scoped(Effect.gen(function*() {
    const opened = yield* SafePath.openSource(file)
    return yield* Manifests.readLimited(opened, maxBytes)
  })).pipe(StoreFs.orStoreError)

/**
 * The seed's key, scoped to the models of the seed's manifests that verify under it (a manifest
 * that does not verify adds nothing: importing it fails later with its own error).
 */
export const scopedKey = (dir: string, maxBytes: number) =>
  Effect.gen(function*() {
    const key = yield* readKey(dir)
    const unscoped = new Map([[key.keyId, key]])
    const scope: Array<Signing.KeyScope> = []
    for (const file of yield* manifestFiles(dir)) {
      const bytes = yield* Effect.either(readManifest(file, maxBytes))
      if (Either.isLeft(bytes)) continue
      const verified = Signing.readEnvelope(bytes.right, unscoped, maxBytes)
      if (Either.isLeft(verified)) continue
      const { name, role } = verified.right.manifest
      if (Path.basename(file) === `${name}${manifestSuffix}`) scope.push({ name, role })
    }
    return { ...key, scope } satisfies Signing.TrustedKey
  })
