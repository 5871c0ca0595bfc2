/**
 * `npm run test:gpu`: the GPU cases, on a machine with an NVIDIA driver and a CUDA build of the
 * engine (`nativegen engine build --gpu cuda`). Elsewhere (CI, machines without a GPU) every case
 * is skipped with the reason. Not part of `npm test` (vitest.config.ts excludes test/gpu).
 */
import { assert, describe, it, layer } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import * as Fs from "node:fs"
import * as Context from "effect/Context"
import * as Layer from "effect/Layer"
import * as Format from "../../src/cli/Format.js"
import * as BackendProbe from "../../src/native/BackendProbe.js"
import { defaultChildSettings } from "../../src/native/ChildSettings.js"
import { type GenerationEvent, NativeWorker } from "../../src/services/NativeWorker.js"
import { Provider } from "../../src/services/Provider.js"
import { awaitReadiness, runtimeLayer, testChild, workerLayer } from "../support/engine.js"
import { gpuBackend, noGpu, skipMessage } from "./support.js"

skipMessage("gpu")

const greedy = { temperature: 0 } as const
const tokensOf = (events: Chunk.Chunk<GenerationEvent>) =>
  Chunk.toArray(events).flatMap((e) => (e._tag === "Token" ? [e.token] : []))
const gpuLibrary = /libcuda\.so|libvulkan\.so|libggml-cuda|libggml-vulkan|libcublas/
const mapsOf = (pid: number | "self") => Fs.readFileSync(`/proc/${pid}/maps`, "utf8")

describe.skipIf(noGpu !== undefined)("GPU (CUDA)", () => {
  it.live("auto chooses CUDA: its probe child loads the CUDA build and runs the probe model", () =>
    Effect.gen(function*() {
      const selection = yield* BackendProbe.select("auto", { settings: { ...defaultChildSettings, threads: 1 } })
      assert.strictEqual(selection.backend, "cuda", selection.outcomes.map(BackendProbe.describeOutcome).join("; "))
      const passed = selection.outcomes.at(-1)
      assert.strictEqual(passed?._tag, "Passed")
      if (passed?._tag === "Passed") console.info(`test:gpu: ${BackendProbe.describeOutcome(passed)}`)
    }), 120_000)

  it.live("status shows the backend, each GPU with its VRAM total and free, the driver's version and the build used", () =>
    Effect.scoped(Effect.gen(function*() {
      const context = yield* Layer.build(runtimeLayer({ worker: { child: { ...testChild, backend: gpuBackend } } }))
      const ready = yield* Context.get(context, Provider).readiness
      assert.strictEqual(ready.engine.backend, "cuda")
      assert.strictEqual(ready.engine.build, "localBuild")
      assert.match(ready.engine.driverVersion ?? "", /^\d+\.\d+/)
      const gpu = ready.engine.devices?.find((d) => d.kind === "gpu")
      assert.isDefined(gpu)
      assert.match(gpu!.name, /NVIDIA/)
      assert.isAbove(gpu!.totalBytes, 0)
      assert.isAbove(gpu!.freeBytes, 0)
      assert.isAtMost(gpu!.freeBytes, gpu!.totalBytes)
      const summary = Format.readinessSummary(ready, { color: false })
      assert.include(summary, `devices    ${gpu!.name}`)
      assert.include(summary, "local build")
      console.info(`test:gpu status:\n${summary}`)
    })), 180_000)

  layer(workerLayer({ child: { ...testChild, backend: gpuBackend } }), { timeout: 180_000, excludeTestServices: true })(
    "an engine child on CUDA",
    (it) => {
      it.effect("the child maps the CUDA libraries; the host maps none of the GPU libraries", () =>
        Effect.gen(function*() {
          const ready = yield* awaitReadiness((r) => r.state === "ready")
          assert.strictEqual(ready.backend, "cuda")
          assert.match(mapsOf(ready.pid!), /libggml-cuda/)
          assert.notMatch(mapsOf("self"), gpuLibrary)
          const gpu = ready.devices.find((d) => d.kind === "gpu")
          assert.isDefined(gpu)
          assert.isAbove(gpu!.totalBytes, 0)
          console.info(`test:gpu: ${gpu!.name}, ${gpu!.totalBytes} bytes, ${gpu!.freeBytes} free`)
        }))

      it.effect("greedy output is the same cold and with the prompt's prefix reused from the first run", () =>
        Effect.gen(function*() {
          const worker = yield* NativeWorker
          const prompt = yield* worker.render("generation", [{ role: "user", content: "the model will answer the question about water and air" }])
          const cold = tokensOf(yield* Stream.runCollect(worker.generate({ prompt, maxTokens: 40, sampling: greedy })))
          const again = tokensOf(yield* Stream.runCollect(worker.generate({ prompt, maxTokens: 40, sampling: greedy })))
          assert.isAbove(cold.length, 0)
          assert.deepStrictEqual(again, cold)
        }))
    }
  )
})
