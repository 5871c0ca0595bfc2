/**
 * The environment of an engine child: not the host's whole environment (which may hold
 * credentials and the embedding application's own settings), only what a Node process, llama.cpp
 * and the GPU drivers read, then the configured `childEnv`, then the child's settings. Shared by
 * both sides; imports nothing native.
 */
import { type ChildSettings, childSettingsToEnv } from "./ChildSettings.js"
import { buildDirectory, cudaGraphsPatch, patchesOf } from "./EngineBuilds.js"

/**
 * Host variables a child inherits by exact name: the executable search path and user basics,
 * locale and time zone, temporary directories, and where GPU runtimes find their libraries and
 * devices. NODE_OPTIONS is not among them: the child is started with its own flags, and the
 * host's (a debugger, a loader) are not meant for it.
 */
export const inheritedNames: ReadonlySet<string> = new Set([
  "PATH",
  "HOME",
  "USER",
  "LOGNAME",
  "LANG",
  "LANGUAGE",
  "TZ",
  "TMPDIR",
  "TMP",
  "TEMP",
  "LD_LIBRARY_PATH",
  "CUDA_PATH",
  "CUDA_VISIBLE_DEVICES",
  "HIP_VISIBLE_DEVICES",
  "ROCR_VISIBLE_DEVICES",
  "GPU_DEVICE_ORDINAL"
])

/**
 * Host variables a child inherits by prefix: locale categories, node-llama-cpp's own settings
 * (NODE_LLAMA_CPP_GPU, _LOG_LEVEL, _DEBUG...), ggml's, and the GPU stacks' (Vulkan loader and ICD
 * selection, CUDA, NVIDIA container variables, GL vendor selection of the Vulkan/EGL loaders),
 * and llama.cpp's own (LLAMA_GRAPH_REUSE_DISABLE...).
 */
export const inheritedPrefixes: ReadonlyArray<string> = [
  "LC_",
  "NODE_LLAMA_CPP_",
  "LLAMA_",
  "GGML_",
  "VK_",
  "CUDA_",
  "NVIDIA_",
  "__EGL_",
  "__GLX_"
]

export const isInherited = (name: string): boolean =>
  inheritedNames.has(name) || inheritedPrefixes.some((prefix) => name.startsWith(prefix))

/**
 * Driver settings a backend needs in its children, before `childEnv` (which may change them).
 * CUDA: ggml's CUDA graphs off, unless the CUDA build in use carries nativegen's graph patch
 * (`buildPatches`, EngineBuilds). Unpatched, a CUDA build for sm_90 on an H200 aborted with "an
 * illegal instruction was encountered" whenever ggml captured a graph of a multi-token batch (two
 * consecutive calls of the same shape in the same KV window: 64- and 128-token prefill chunks abort,
 * 256 and more do not; docs/gpu.md); the patch captures single-token batches (decode steps) only.
 */
export const backendDefaults = (
  backend: ChildSettings["backend"],
  buildPatches: ReadonlyArray<string>
): Readonly<Record<string, string>> =>
  backend === "cuda" && !buildPatches.includes(cudaGraphsPatch) ? { GGML_CUDA_DISABLE_GRAPHS: "1" } : {}

/** The patches of the local build a child of `backend` loads (a CUDA child: the CUDA build's; others: none that matter). */
export const localBuildPatches = (backend: ChildSettings["backend"]): ReadonlyArray<string> =>
  backend === "cuda" ? patchesOf(buildDirectory("cuda")) : []

/**
 * ggml switches CUDA graphs off when GGML_CUDA_DISABLE_GRAPHS is present at all, whatever its
 * value (`getenv(...) != nullptr`, ggml-cuda/common.cuh). So "0" or "" from the operator or
 * `childEnv` means graphs on: the variable is left out of the child's environment.
 */
const graphsSwitch = "GGML_CUDA_DISABLE_GRAPHS"
const withoutGraphsOffByZero = (env: Record<string, string>): Record<string, string> => {
  const value = env[graphsSwitch]
  if (value !== "0" && value !== "") return env
  const { [graphsSwitch]: _, ...rest } = env
  return rest
}

/**
 * The child's environment: the backend's defaults, then the inherited part of `host` (a driver
 * variable the operator set, e.g. GGML_CUDA_DISABLE_GRAPHS=0, wins over the default), then
 * `childEnv` (which may add or replace variables), then the settings and `fixed` (which
 * `childEnv` cannot override). GGML_CUDA_DISABLE_GRAPHS=0 leaves the variable out (graphs on).
 * `buildPatches`: those of the build the child will load (read from its record by default).
 */
export const childEnvironment = (
  host: Readonly<Record<string, string | undefined>>,
  settings: ChildSettings,
  childEnv: Readonly<Record<string, string>> = {},
  fixed: Readonly<Record<string, string>> = {},
  buildPatches: ReadonlyArray<string> = localBuildPatches(settings.backend)
): Record<string, string> => {
  const inherited = Object.entries(host).filter((entry): entry is [string, string] =>
    entry[1] !== undefined && isInherited(entry[0])
  )
  return withoutGraphsOffByZero({
    ...backendDefaults(settings.backend, buildPatches),
    ...Object.fromEntries(inherited),
    ...childEnv,
    ...childSettingsToEnv(settings),
    ...fixed
  })
}
