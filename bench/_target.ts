/**
 * What the benchmarks run on: `BENCH_BACKEND` (cpu, the default; cuda, vulkan, metal) and
 * `BENCH_MODEL` (a fixtures model name replacing the benchmark's generation model, e.g.
 * qwen3-0.6b-shape on a GPU). bench/gpu/run.sh sets both on the device.
 */
import { type ModelName, modelSpecs } from "../fixtures/models.js"
import type { Backend } from "../src/native/Protocol.js"

const backends: ReadonlyArray<Backend> = ["cpu", "cuda", "vulkan", "metal"]

export const benchBackend: Backend = (() => {
  const chosen = process.env.BENCH_BACKEND
  if (chosen === undefined || chosen === "") return "cpu"
  const found = backends.find((b) => b === chosen)
  if (found === undefined) throw new Error(`BENCH_BACKEND=${chosen}: one of ${backends.join(", ")}`)
  return found
})()

/** `BENCH_MODEL` when set (a known fixtures model), else `fallback`. */
export const benchModel = (fallback: ModelName): ModelName => {
  const chosen = process.env.BENCH_MODEL
  if (chosen === undefined || chosen === "") return fallback
  if (!Object.hasOwn(modelSpecs, chosen)) throw new Error(`BENCH_MODEL=${chosen}: not a fixtures model (${Object.keys(modelSpecs).join(", ")})`)
  return chosen as ModelName
}

/** Layers llama.cpp tools offload: all on a GPU backend, none on the CPU. */
export const peerGpuLayers = benchBackend === "cpu" ? 0 : 999
