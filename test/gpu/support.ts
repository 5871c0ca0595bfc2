/**
 * What the GPU tests share: why they are skipped here (no NVIDIA driver), and a worker or runtime
 * on a chosen backend for the length of one effect (the CPU and CUDA sides of a parity check).
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as BackendProbe from "../../src/native/BackendProbe.js"
import type { Backend } from "../../src/native/Protocol.js"
import { NativeWorker, type NativeWorkerConfigShape } from "../../src/services/NativeWorker.js"
import { testChild, workerLayer } from "../support/engine.js"

/**
 * The GPU backend under test: cuda, or NATIVEGEN_GPU_TEST_BACKEND (`vulkan`; `cpu` runs the cases'
 * logic on a machine without a GPU, to check a change before device time is spent: the GPU-only
 * assertions then fail, the rest must pass).
 */
export const gpuBackend: Backend = (() => {
  const chosen = process.env.NATIVEGEN_GPU_TEST_BACKEND
  return chosen === "cpu" || chosen === "vulkan" ? chosen : "cuda"
})()

/** Why the GPU cases cannot run here, or undefined where the backend's driver is installed. */
export const noGpu = gpuBackend === "cpu" ? undefined : BackendProbe.driverAbsence(gpuBackend, process.env as Record<string, string>)

export const skipMessage = (file: string) => {
  if (noGpu !== undefined) console.info(`test:gpu ${file}: skipped, ${noGpu}`)
}

/** `use` with a fresh worker on `backend` over `models`, stopped afterwards. */
export const withWorker = <A, E>(
  backend: Backend,
  models: NativeWorkerConfigShape["models"],
  use: (worker: Context.Tag.Service<NativeWorker>) => Effect.Effect<A, E>
) =>
  Effect.scoped(
    Effect.flatMap(
      Layer.build(workerLayer({ child: { ...testChild, backend }, models })),
      (context) => use(Context.get(context, NativeWorker))
    )
  )
