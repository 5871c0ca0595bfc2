/**
 * `nativegen engine build`: the node-llama-cpp commands it runs for each backend, the source step
 * only when the source is not there yet, where the build is kept, and nativegen's own source patches
 * (applied to the llama.cpp source node-llama-cpp ships, once, and recorded beside the build).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { compileStep, downloadSteps, patchesFor } from "../../src/cli/Engine.js"
import { applySourcePatch } from "../../src/cli/SourcePatches.js"
import {
  buildDirectory,
  cudaGraphsPatch,
  nodeLlamaCppDirectory,
  patchesOf,
  recordPatches,
  sourcePatches
} from "../../src/native/EngineBuilds.js"

const withTemporaryDirectory = <A>(use: (dir: string) => A): A => {
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "nativegen-engine-"))
  try {
    return use(dir)
  } finally {
    Fs.rmSync(dir, { recursive: true, force: true })
  }
}

/** The shipped llama.cpp source's `file` (from the bundle node-llama-cpp ships), written under `sourceDir`. */
const shippedSource = (sourceDir: string, file: string): string => {
  const clone = Path.join(sourceDir, "..", "clone")
  if (!Fs.existsSync(clone)) {
    ChildProcess.execFileSync("git", ["clone", "-q", "--no-checkout", Path.join(nodeLlamaCppDirectory(), "llama", "gitRelease.bundle"), clone])
  }
  const text = ChildProcess.execFileSync("git", ["-C", clone, "show", `HEAD:${file}`], { encoding: "utf8", maxBuffer: 1 << 26 })
  Fs.mkdirSync(Path.dirname(Path.join(sourceDir, file)), { recursive: true })
  Fs.writeFileSync(Path.join(sourceDir, file), text)
  return text
}

const cudaFile = "ggml/src/ggml-cuda/ggml-cuda.cu"

describe("engine build", () => {
  it("builds with node-llama-cpp's own CLI: cpu as --gpu false, GPUs by name; the source first when absent", () =>
    withTemporaryDirectory((packageDir) => {
      const cli = Path.join(packageDir, "dist", "cli", "cli.js")
      assert.deepStrictEqual(downloadSteps(packageDir).map((s) => s.args), [
        [cli, "source", "download", "--skipBuild", "--noUsageExample"]
      ])
      assert.deepStrictEqual(compileStep("cpu", packageDir).args, [cli, "source", "build", "--gpu", "false", "--noUsageExample"])
      Fs.mkdirSync(Path.join(packageDir, "llama", "llama.cpp", ".git"), { recursive: true })
      assert.deepStrictEqual(downloadSteps(packageDir), [])
      assert.deepStrictEqual(compileStep("cuda", packageDir).args, [cli, "source", "build", "--gpu", "cuda", "--noUsageExample"])
    }))

  it("keeps the build where node-llama-cpp loads local builds from, beside the shipped source", () => {
    const dir = nodeLlamaCppDirectory()
    assert.isTrue(Fs.existsSync(Path.join(dir, "llama", "gitRelease.bundle")))
    assert.strictEqual(buildDirectory("vulkan", dir), Path.join(dir, "llama", "localBuilds", `${process.platform}-${process.arch}-vulkan`))
    assert.strictEqual(buildDirectory("cpu", dir), Path.join(dir, "llama", "localBuilds", `${process.platform}-${process.arch}`))
  })

  it("the CUDA build gets the graph patch; the others get none", () => {
    assert.deepStrictEqual(patchesFor("cuda").map((p) => p.name), [cudaGraphsPatch])
    assert.deepStrictEqual(patchesFor("vulkan"), [])
    assert.deepStrictEqual(patchesFor("cpu"), [])
  })

  it.effect("the graph patch applies to the shipped llama.cpp source once, limiting ggml-cuda's graphs to single-token batches", () =>
    Effect.gen(function*() {
      const root = Fs.mkdtempSync(Path.join(Os.tmpdir(), "nativegen-patch-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => Fs.rmSync(root, { recursive: true, force: true })))
      const sourceDir = Path.join(root, "llama.cpp")
      shippedSource(sourceDir, cudaFile)
      const patch = sourcePatches.find((p) => p.name === cudaGraphsPatch)!
      assert.strictEqual(yield* applySourcePatch(patch, sourceDir), "applied")
      const patched = Fs.readFileSync(Path.join(sourceDir, cudaFile), "utf8")
      // The check sits inside ggml_cuda_graph_check_compability, before its MUL_MAT_ID rule.
      const check = patched.indexOf("node->op == GGML_OP_ADD && node->src[1] && node->src[1]->ne[1] > 1")
      const compatibilityCheck = patched.indexOf("static bool ggml_cuda_graph_check_compability")
      assert.isAbove(check, compatibilityCheck)
      assert.isBelow(check, patched.indexOf("[TAG_MUL_MAT_ID_CUDA_GRAPHS]", compatibilityCheck))
      assert.strictEqual(yield* applySourcePatch(patch, sourceDir), "already applied")
      assert.strictEqual(Fs.readFileSync(Path.join(sourceDir, cudaFile), "utf8"), patched)
    }).pipe(Effect.scoped))

  it.effect("a source the patch does not match is refused, naming the patch and the file, and left as it was", () =>
    Effect.gen(function*() {
      const root = Fs.mkdtempSync(Path.join(Os.tmpdir(), "nativegen-patch-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => Fs.rmSync(root, { recursive: true, force: true })))
      const sourceDir = Path.join(root, "llama.cpp")
      const other = shippedSource(sourceDir, cudaFile).replaceAll("[TAG_MUL_MAT_ID_CUDA_GRAPHS]", "[ANOTHER RELEASE]")
      Fs.writeFileSync(Path.join(sourceDir, cudaFile), other)
      const error = yield* Effect.flip(applySourcePatch(sourcePatches[0]!, sourceDir))
      assert.strictEqual(error._tag, "PatchDoesNotApply")
      assert.include(error.message, cudaGraphsPatch)
      assert.include(error.message, Path.join(sourceDir, cudaFile))
      assert.strictEqual(Fs.readFileSync(Path.join(sourceDir, cudaFile), "utf8"), other)
    }).pipe(Effect.scoped))

  it("a build records its patches; a build without a record has none", () =>
    withTemporaryDirectory((buildDir) => {
      assert.deepStrictEqual(patchesOf(buildDir), [])
      Effect.runSync(recordPatches(buildDir, [cudaGraphsPatch]))
      assert.deepStrictEqual(patchesOf(buildDir), [cudaGraphsPatch])
    }))
})
