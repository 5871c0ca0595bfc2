/**
 * `--backend auto`: the probe order, the skips that need no process, a real probe child passing
 * on the CPU and failing on a GPU backend this machine has no driver for, and the driver settings
 * a backend's children get (and only they: the host's environment is never changed).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as BackendProbe from "../../src/native/BackendProbe.js"
import { backendDefaults, childEnvironment } from "../../src/native/ChildEnvironment.js"
import { cudaGraphsPatch } from "../../src/native/EngineBuilds.js"
import { defaultChildSettings } from "../../src/native/ChildSettings.js"

const settings = { ...defaultChildSettings, threads: 1 }

describe("backend selection", () => {
  it.effect("a named backend is used as it is, with no probe", () =>
    Effect.gen(function*() {
      const selection = yield* BackendProbe.select("vulkan", { settings })
      assert.deepStrictEqual(selection, { backend: "vulkan", outcomes: [] })
    }))

  it.effect("auto with no GPU driver present: CUDA and Vulkan are skipped without a process, the CPU is chosen", () =>
    Effect.gen(function*() {
      const selection = yield* BackendProbe.select("auto", { settings, driverPresent: (backend) => `no ${backend} driver` })
      assert.strictEqual(selection.backend, "cpu")
      assert.deepStrictEqual(selection.outcomes.map((o) => [o._tag, o.backend]), [["Skipped", "cuda"], ["Skipped", "vulkan"]])
    }))

  it("software Vulkan devices are recognised, real GPUs are not", () => {
    assert.isTrue(BackendProbe.isSoftwareDevice("llvmpipe (LLVM 15.0.6, 256 bits)"))
    assert.isTrue(BackendProbe.isSoftwareDevice("SwiftShader Device (Subzero)"))
    assert.isFalse(BackendProbe.isSoftwareDevice("NVIDIA H200"))
  })

  it.live("a probe child passes on the CPU: it loads the build, runs the probe model and reports", () =>
    Effect.gen(function*() {
      const outcome = yield* BackendProbe.probe("cpu", { settings })
      assert.strictEqual(outcome._tag, "Passed", BackendProbe.describeOutcome(outcome))
      if (outcome._tag === "Passed") {
        assert.strictEqual(outcome.report.backend, "cpu")
        assert.oneOf(outcome.report.build, ["prebuilt", "localBuild"])
      }
    }), 60_000)

  it.live("auto where a GPU backend cannot run: its probe fails in its own process and the CPU is chosen", () =>
    Effect.gen(function*() {
      // Pretend the drivers are there: the probes start, and fail on this machine (no CUDA, no Vulkan loader).
      const selection = yield* BackendProbe.select("auto", { settings, driverPresent: () => undefined })
      assert.strictEqual(selection.backend, "cpu")
      assert.deepStrictEqual(selection.outcomes.map((o) => [o._tag, o.backend]), [["Failed", "cuda"], ["Failed", "vulkan"]])
      for (const o of selection.outcomes) assert.notStrictEqual(BackendProbe.describeOutcome(o), "")
    }), 120_000)

  it("CUDA children of an unpatched build get ggml's CUDA graphs off, which childEnv or the operator's own variable may change; other backends and the host get nothing", () => {
    const host = { PATH: "/usr/bin" }
    const cuda = { ...settings, backend: "cuda" as const }
    const unpatched: ReadonlyArray<string> = []
    assert.strictEqual(childEnvironment(host, cuda, {}, {}, unpatched).GGML_CUDA_DISABLE_GRAPHS, "1")
    // ggml reads the variable's presence, not its value: "0" turns graphs on by leaving it out.
    assert.notProperty(childEnvironment(host, cuda, { GGML_CUDA_DISABLE_GRAPHS: "0" }, {}, unpatched), "GGML_CUDA_DISABLE_GRAPHS")
    // An operator who sets it in the server's environment (to measure graphs on, say) gets it.
    assert.notProperty(childEnvironment({ ...host, GGML_CUDA_DISABLE_GRAPHS: "0" }, cuda, {}, {}, unpatched), "GGML_CUDA_DISABLE_GRAPHS")
    assert.notProperty(childEnvironment(host, cuda, { GGML_CUDA_DISABLE_GRAPHS: "" }, {}, unpatched), "GGML_CUDA_DISABLE_GRAPHS")
    assert.strictEqual(childEnvironment({ ...host, GGML_CUDA_DISABLE_GRAPHS: "yes" }, cuda, {}, {}, unpatched).GGML_CUDA_DISABLE_GRAPHS, "yes")
    assert.isUndefined(childEnvironment(host, { ...settings, backend: "cpu" }).GGML_CUDA_DISABLE_GRAPHS)
    // llama.cpp's own variables (LLAMA_GRAPH_REUSE_DISABLE...) reach the children.
    assert.strictEqual(childEnvironment({ ...host, LLAMA_GRAPH_REUSE_DISABLE: "1" }, cuda).LLAMA_GRAPH_REUSE_DISABLE, "1")
    assert.deepStrictEqual(backendDefaults("vulkan", []), {})
    assert.isUndefined(process.env.GGML_CUDA_DISABLE_GRAPHS)
  })

  it("a CUDA build that carries nativegen's graph patch runs with graphs on, unless the operator turns them off", () => {
    const host = { PATH: "/usr/bin" }
    const cuda = { ...settings, backend: "cuda" as const }
    assert.notProperty(childEnvironment(host, cuda, {}, {}, [cudaGraphsPatch]), "GGML_CUDA_DISABLE_GRAPHS")
    assert.strictEqual(childEnvironment(host, cuda, { GGML_CUDA_DISABLE_GRAPHS: "1" }, {}, [cudaGraphsPatch]).GGML_CUDA_DISABLE_GRAPHS, "1")
    assert.strictEqual(childEnvironment({ ...host, GGML_CUDA_DISABLE_GRAPHS: "1" }, cuda, {}, {}, [cudaGraphsPatch]).GGML_CUDA_DISABLE_GRAPHS, "1")
  })
})
