/**
 * What the host tells an engine child at spawn time, carried in its environment. Shared by both
 * sides; imports nothing native.
 */
import type { Backend } from "./Protocol.js"

/**
 * Evaluation threads: a count, or "auto": the child takes llama.cpp's own choice for this machine
 * (`cpu_get_num_math()`: the physical cores, the performance cores only on a hybrid CPU) and
 * reports the count in its hello (docs/decisions.md, "Threads auto").
 */
export type Threads = number | "auto"

/** A thread setting from text (a flag or the environment): "auto" or a positive integer; undefined otherwise. */
export const parseThreads = (value: string): Threads | undefined => {
  if (value.trim().toLowerCase() === "auto") return "auto"
  const n = Number(value)
  return value.trim() !== "" && Number.isInteger(n) && n > 0 ? n : undefined
}

/**
 * Threads for decode steps when `decodeThreads` is "auto": the evaluation threads, less one when
 * they would take every CPU the child may run on (at least one). A decode step is short (a few ms)
 * and the per-token JavaScript of the child, host and client runs beside it; with ggml's threads on
 * every core, any of it stalls them at ggml's spin barrier (docs/decisions.md, "The engine gap").
 * A count is used as given, at most `threads`.
 */
export const resolveDecodeThreads = (decodeThreads: Threads | undefined, threads: number, cpus: number): number =>
  decodeThreads === undefined || decodeThreads === "auto"
    ? threads >= cpus ? Math.max(1, threads - 1) : threads
    : Math.min(decodeThreads, threads)

export interface ChildSettings {
  /** Which llama.cpp build the child loads; "cpu" never touches GPU libraries. */
  readonly backend: Backend
  /** Threads for evaluation; the default 4 on two cores is ~140x slower (engine-notes.md). */
  readonly threads: Threads
  /**
   * Threads for decode steps (NATIVEGEN_DECODE_THREADS): "auto" (the default; `resolveDecodeThreads`)
   * or a count. Prefill, scoring and every other native call use `threads`, as llama.cpp's own
   * `--threads` and `--threads-batch` split them.
   */
  readonly decodeThreads?: Threads | undefined
  /** Largest batch in one native evaluation; prefill chunks never exceed it. */
  readonly batchSize: number
  /**
   * Decode the steps of concurrent generations in one native batch (NATIVEGEN_BATCH_DECODE).
   * Default on. Greedy output is the same either way; off keeps each generation's probabilities
   * bit-identical to a solo run whatever runs beside it, at the throughput of one token per call.
   */
  readonly batchDecode?: boolean | undefined
}

export const defaultChildSettings: ChildSettings = { backend: "cpu", threads: 1, batchSize: 512, batchDecode: true }

/**
 * Tokens per prefill chunk when none is configured: 128 on the CPU, where a chunk takes ~100 ms
 * and bounds how long a decision waits behind a prefill; a whole native batch on a GPU, where
 * 512 tokens take a few milliseconds and every chunk is a host round trip (on an H200, 128-token
 * chunks held a 4,000-token prefill to ~0.24x llama-bench: docs/gpu.md).
 */
export const defaultPrefillChunk = (backend: Backend, batchSize: number): number =>
  backend === "cpu" ? Math.min(128, batchSize) : batchSize

const backends: ReadonlyArray<Backend> = ["cpu", "cuda", "vulkan", "metal"]

export const childSettingsToEnv = (settings: ChildSettings): Record<string, string> => ({
  NATIVEGEN_BACKEND: settings.backend,
  NATIVEGEN_THREADS: String(settings.threads),
  NATIVEGEN_DECODE_THREADS: String(settings.decodeThreads ?? "auto"),
  NATIVEGEN_BATCH_SIZE: String(settings.batchSize),
  NATIVEGEN_BATCH_DECODE: settings.batchDecode === false ? "0" : "1",
  // One libuv worker: a second one lets ggml's helper thread and the step share a core (engine-notes.md).
  UV_THREADPOOL_SIZE: "1"
})

const positive = (value: string | undefined, fallback: number) => {
  const n = value === undefined ? NaN : Number(value)
  return Number.isInteger(n) && n > 0 ? n : fallback
}

export const childSettingsFromEnv = (env: NodeJS.ProcessEnv): ChildSettings => {
  const backend = backends.find((b) => b === env.NATIVEGEN_BACKEND) ?? defaultChildSettings.backend
  return {
    backend,
    threads: (env.NATIVEGEN_THREADS === undefined ? undefined : parseThreads(env.NATIVEGEN_THREADS)) ??
      defaultChildSettings.threads,
    decodeThreads: (env.NATIVEGEN_DECODE_THREADS === undefined ? undefined : parseThreads(env.NATIVEGEN_DECODE_THREADS)) ?? "auto",
    batchSize: positive(env.NATIVEGEN_BATCH_SIZE, defaultChildSettings.batchSize),
    batchDecode: env.NATIVEGEN_BATCH_DECODE !== "0"
  }
}
