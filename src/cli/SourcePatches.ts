/**
 * Applying nativegen's patches (EngineBuilds.sourcePatches: unified diffs in the package's
 * `patches/llama.cpp/`) to the llama.cpp source before `nativegen engine build` compiles it, with
 * jsdiff: exactly (no fuzz), a file already patched left alone (its reversed diff applies), and
 * nothing written when a file matches neither.
 */
import * as Diff from "diff"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { packageRoot } from "../internal/PackageFiles.js"
import type { SourcePatch } from "../native/EngineBuilds.js"

const patchFile = (patch: SourcePatch): string => Path.join(packageRoot(), "patches", "llama.cpp", `${patch.name}.diff`)

/** A patch's hunks do not match the source (another llama.cpp release than the one it was written for). */
export class PatchDoesNotApply extends Data.TaggedError("PatchDoesNotApply")<{
  readonly patch: string
  readonly file: string
}> {
  override get message() {
    return `the patch ${this.patch} does not apply to ${this.file} (neither applied nor matching: another llama.cpp source?)`
  }
}

/** The file a diff names, relative to the source root (`a/` and `b/` prefixes dropped). */
const targetOf = (diff: Diff.StructuredPatch): string => (diff.newFileName ?? diff.oldFileName ?? "").replace(/^[ab]\//, "")

/**
 * Applies `patch` to the source under `sourceDir`, file by file: a file already patched is left as
 * it is (the reversed diff applies to it), one that matches neither fails with PatchDoesNotApply
 * before any file is written.
 */
export const applySourcePatch = (patch: SourcePatch, sourceDir: string) =>
  Effect.gen(function*() {
    const diffs = Diff.parsePatch(yield* Effect.sync(() => Fs.readFileSync(patchFile(patch), "utf8")))
    const writes: Array<readonly [string, string]> = []
    for (const diff of diffs) {
      const file = Path.join(sourceDir, targetOf(diff))
      const source = yield* Effect.sync(() => Fs.readFileSync(file, "utf8"))
      const patched = Diff.applyPatch(source, diff)
      if (patched !== false) writes.push([file, patched])
      else if (Diff.applyPatch(source, Diff.reversePatch(diff)) === false) {
        return yield* new PatchDoesNotApply({ patch: patch.name, file })
      }
    }
    yield* Effect.sync(() => writes.forEach(([file, text]) => Fs.writeFileSync(file, text)))
    return writes.length > 0 ? "applied" as const : "already applied" as const
  })
