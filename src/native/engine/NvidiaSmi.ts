/**
 * What NVIDIA's driver reports through `nvidia-smi`: each GPU with its total and free memory, and
 * the memory each process holds (per-process, unlike node-llama-cpp's device-wide VRAM state).
 * Used by the engine child's inventory on the CUDA backend; absent (no nvidia-smi, no driver) it
 * answers none, and the inventory falls back to node-llama-cpp's figures. Child code.
 */
import * as Effect from "effect/Effect"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"

const MiB = 1024 * 1024

export interface GpuReading {
  readonly index: number
  readonly name: string
  readonly totalBytes: number
  readonly freeBytes: number
}

const numberOrUndefined = (text: string | undefined) => {
  const n = Number(text?.trim())
  return text === undefined || text.trim() === "" || !Number.isFinite(n) ? undefined : n
}

/** `--query-gpu=index,name,memory.total,memory.free --format=csv,noheader,nounits` (MiB), one GPU a line. */
export const parseGpus = (text: string): ReadonlyArray<GpuReading> =>
  text.split("\n").flatMap((line) => {
    const fields = line.split(",")
    if (fields.length < 4) return []
    const index = numberOrUndefined(fields[0])
    const total = numberOrUndefined(fields.at(-2))
    const free = numberOrUndefined(fields.at(-1))
    const name = fields.slice(1, -2).join(",").trim()
    return index === undefined || total === undefined || free === undefined || name === ""
      ? []
      : [{ index, name, totalBytes: total * MiB, freeBytes: free * MiB }]
  })

/**
 * `--query-compute-apps=pid,used_memory --format=csv,noheader,nounits` (MiB): the bytes `pid`
 * holds on all GPUs, or undefined when it is not listed (a process in another PID namespace is
 * listed under another number, so absence is not zero).
 */
export const parseProcessMemory = (text: string, pid: number): number | undefined => {
  let total: number | undefined
  for (const line of text.split("\n")) {
    const [pidField, usedField] = line.split(",")
    if (numberOrUndefined(pidField) !== pid) continue
    const used = numberOrUndefined(usedField)
    if (used !== undefined) total = (total ?? 0) + used * MiB
  }
  return total
}

/** The GPUs a `CUDA_VISIBLE_DEVICES` of indices leaves visible (all when unset; UUID lists are not filtered). */
export const visible = (gpus: ReadonlyArray<GpuReading>, setting: string | undefined): ReadonlyArray<GpuReading> => {
  if (setting === undefined || setting.trim() === "") return gpus
  const indices = setting.split(",").map((s) => Number(s.trim()))
  if (indices.some((i) => !Number.isInteger(i))) return gpus
  return indices.flatMap((i) => gpus.filter((g) => g.index === i))
}

/** Runs nvidia-smi with `args`; its output, or undefined when it cannot run. */
export const query = (args: ReadonlyArray<string>): Effect.Effect<string | undefined> =>
  Effect.async<string | undefined>((resume) => {
    const child = ChildProcess.execFile("nvidia-smi", args, { timeout: 10_000, encoding: "utf8" }, (error, stdout) =>
      resume(Effect.succeed(error === null ? stdout : undefined)))
    return Effect.sync(() => child.kill())
  })

export const gpus: Effect.Effect<ReadonlyArray<GpuReading>> = Effect.map(
  query(["--query-gpu=index,name,memory.total,memory.free", "--format=csv,noheader,nounits"]),
  (text) => (text === undefined ? [] : visible(parseGpus(text), process.env.CUDA_VISIBLE_DEVICES))
)

export const processMemory = (pid: number): Effect.Effect<number | undefined> =>
  Effect.map(
    query(["--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]),
    (text) => (text === undefined ? undefined : parseProcessMemory(text, pid))
  )

/** The kernel module's version from `/proc/driver/nvidia/version` ("... Kernel Module  580.159.04  ..."). */
export const parseDriverVersion = (text: string): string | undefined =>
  /Kernel Module(?:\s+for\s+\S+)?\s+(\d+(?:\.\d+)+)/.exec(text)?.[1]

/** The NVIDIA driver's version, read from the kernel module's file (no process); undefined without the driver. */
export const driverVersion: Effect.Effect<string | undefined> = Effect.sync(() => {
  try {
    return parseDriverVersion(Fs.readFileSync("/proc/driver/nvidia/version", "utf8"))
  } catch {
    return undefined
  }
})
