/**
 * What the engine child reports about itself: `hello` (protocol and library versions, backend,
 * the build it loaded (local or prebuilt), threads, pid, and its devices with their total and free
 * memory: on CUDA each visible GPU as nvidia-smi lists it, and the driver's version) and `memory` (a real reading of the child's RSS and used VRAM, not
 * node-llama-cpp's memoryUsage, which repeats the plan's reservation; on CUDA the VRAM this process
 * holds where the driver lists it, else the device-wide figure).
 */
import * as Effect from "effect/Effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { nodeLlamaCppDirectory } from "../EngineBuilds.js"
import { DeviceInfo, HelloInfo, MemoryReading, PROTOCOL_VERSION } from "../Protocol.js"
import type { Native } from "./Llama.js"
import * as NvidiaSmi from "./NvidiaSmi.js"

export interface Inventory {
  readonly hello: Effect.Effect<HelloInfo>
  readonly memory: Effect.Effect<MemoryReading>
}

/** node-llama-cpp's version, from its package.json (it exports no subpath for it). */
const packageVersion = (): string => {
  try {
    const pkg: { version?: unknown } = JSON.parse(Fs.readFileSync(Path.join(nodeLlamaCppDirectory(), "package.json"), "utf8"))
    return typeof pkg.version === "string" ? pkg.version : "unknown"
  } catch {
    return "unknown"
  }
}

export const make = ({ llama, threads }: Native): Inventory => ({
  hello: Effect.gen(function*() {
    const gpu = llama.gpu
    const devices: Array<DeviceInfo> = []
    const listed = gpu === "cuda" ? yield* NvidiaSmi.gpus : []
    if (gpu === false) {
      devices.push(new DeviceInfo({ name: "cpu", kind: "cpu", totalBytes: Os.totalmem(), freeBytes: Os.freemem() }))
    } else if (listed.length > 0) {
      // One entry per visible GPU, as the driver reports it.
      for (const g of listed) {
        devices.push(new DeviceInfo({ name: g.name, kind: "gpu", totalBytes: g.totalBytes, freeBytes: g.freeBytes }))
      }
    } else {
      const vram = yield* Effect.promise(() => llama.getVramState())
      const names = yield* Effect.promise(() => llama.getGpuDeviceNames())
      devices.push(
        new DeviceInfo({ name: names.join(", ") || gpu, kind: "gpu", totalBytes: vram.total, freeBytes: vram.free })
      )
    }
    const driverVersion = gpu === "cuda" ? yield* NvidiaSmi.driverVersion : undefined
    return new HelloInfo({
      protocolVersion: PROTOCOL_VERSION,
      nodeLlamaCppVersion: packageVersion(),
      llamaCppRelease: llama.llamaCppRelease.release,
      backend: gpu === false ? "cpu" : gpu,
      build: llama.buildType,
      threads,
      pid: process.pid,
      devices,
      ...(driverVersion === undefined ? {} : { driverVersion })
    })
  }),
  memory: Effect.gen(function*() {
    // On CUDA, this process's own VRAM where the driver lists it (another process's allocation is
    // not ours); else the device-wide figure.
    const own = llama.gpu === "cuda" ? yield* NvidiaSmi.processMemory(process.pid) : undefined
    const vramUsedBytes = llama.gpu === false
      ? 0
      : own ?? (yield* Effect.promise(() => llama.getVramState())).used
    return new MemoryReading({ rssBytes: process.memoryUsage.rss(), vramUsedBytes })
  })
})
