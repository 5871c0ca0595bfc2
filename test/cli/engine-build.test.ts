/**
 * `nativegen engine build`: the node-llama-cpp commands it runs for each backend, the source step
 * only when the source is not there yet, and where the build is kept.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { buildDirectory, buildSteps, nodeLlamaCppDirectory } from "../../src/cli/Engine.js"

describe("engine build", () => {
  it("builds with node-llama-cpp's own CLI: cpu as --gpu false, GPUs by name; the source first when absent", () => {
    const packageDir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "nativegen-engine-"))
    try {
      const cli = Path.join(packageDir, "dist", "cli", "cli.js")
      assert.deepStrictEqual(buildSteps("cpu", packageDir).map((s) => s.args), [
        [cli, "source", "download", "--skipBuild", "--noUsageExample"],
        [cli, "source", "build", "--gpu", "false", "--noUsageExample"]
      ])
      Fs.mkdirSync(Path.join(packageDir, "llama", "llama.cpp", ".git"), { recursive: true })
      assert.deepStrictEqual(buildSteps("cuda", packageDir).map((s) => s.args), [
        [cli, "source", "build", "--gpu", "cuda", "--noUsageExample"]
      ])
    } finally {
      Fs.rmSync(packageDir, { recursive: true, force: true })
    }
  })

  it("keeps the build where node-llama-cpp loads local builds from, beside the shipped source", () => {
    const dir = nodeLlamaCppDirectory()
    assert.isTrue(Fs.existsSync(Path.join(dir, "llama", "gitRelease.bundle")))
    assert.strictEqual(buildDirectory("vulkan", dir), Path.join(dir, "llama", "localBuilds", `${process.platform}-${process.arch}-vulkan`))
    assert.strictEqual(buildDirectory("cpu", dir), Path.join(dir, "llama", "localBuilds", `${process.platform}-${process.arch}`))
  })
})
