/**
 * node-llama-cpp's local builds of llama.cpp (made by `nativegen engine build`) and nativegen's own
 * patches to the source they are built from: where a build is kept, which patches there are (unified
 * diffs in the package's `patches/llama.cpp/`, applied by the build: src/cli/SourcePatches.ts) and
 * the record a build keeps of the patches it was built with (`nativegen-patches.json` in its
 * directory), from which the host tells what a build is safe to do (CUDA graphs: ChildEnvironment).
 * Paths and small files only: nothing native is loaded, and nothing of the patching (engine children
 * import this module).
 */
import * as Effect from "effect/Effect"
import * as Fs from "node:fs"
import { createRequire } from "node:module"
import * as Path from "node:path"

export const buildGpus = ["cuda", "vulkan", "cpu"] as const
export type BuildGpu = typeof buildGpus[number]

/** Whether `dir` holds node-llama-cpp's package.json. */
const isPackageDirectory = (dir: string): boolean => {
  try {
    const pkg: { name?: unknown } = JSON.parse(Fs.readFileSync(Path.join(dir, "package.json"), "utf8"))
    return pkg.name === "node-llama-cpp"
  } catch {
    return false
  }
}

/**
 * node-llama-cpp's package directory, found from its resolved entry by its package.json (a path
 * only: nothing is loaded). Not by the source bundle: an installation whose source is already
 * unpacked (or was copied without the bundle) has none.
 */
export const nodeLlamaCppDirectory = (): string => {
  let dir = Path.dirname(createRequire(import.meta.url).resolve("node-llama-cpp"))
  while (!isPackageDirectory(dir) && dir !== Path.dirname(dir)) dir = Path.dirname(dir)
  return dir
}

/** Where node-llama-cpp keeps its local build for `gpu` on this platform. */
export const buildDirectory = (gpu: BuildGpu, packageDir: string = nodeLlamaCppDirectory()): string =>
  Path.join(packageDir, "llama", "localBuilds", `${process.platform}-${process.arch}${gpu === "cpu" ? "" : `-${gpu}`}`)

/** Where node-llama-cpp keeps the llama.cpp source it builds from. */
export const sourceDirectory = (packageDir: string): string => Path.join(packageDir, "llama", "llama.cpp")

export interface SourcePatch {
  readonly name: string
  /** The builds it belongs in (it touches code only they compile). */
  readonly gpus: ReadonlyArray<BuildGpu>
}

/**
 * nativegen's patches. `cuda-graphs-single-token`: ggml-cuda captures CUDA graphs of single-token
 * batches (decode steps) only; graphs of multi-token batches abort on sm_90 here (docs/gpu.md).
 */
export const sourcePatches: ReadonlyArray<SourcePatch> = [{ name: "cuda-graphs-single-token", gpus: ["cuda"] }]
export const cudaGraphsPatch = "cuda-graphs-single-token"

const recordFile = (buildDir: string): string => Path.join(buildDir, "nativegen-patches.json")

/** Records the patches a build in `buildDir` was made with. */
export const recordPatches = (buildDir: string, names: ReadonlyArray<string>) =>
  Effect.sync(() => Fs.writeFileSync(recordFile(buildDir), JSON.stringify({ patches: names }) + "\n"))

/** The patches the build in `buildDir` was made with (none where it has no record: a build made otherwise). */
export const patchesOf = (buildDir: string): ReadonlyArray<string> => {
  try {
    const record: { patches?: unknown } = JSON.parse(Fs.readFileSync(recordFile(buildDir), "utf8"))
    return Array.isArray(record.patches) ? record.patches.filter((name) => typeof name === "string") : []
  } catch {
    return []
  }
}
