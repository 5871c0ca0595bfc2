/**
 * Staging throughput: `Store.stage` of a 1 GiB file (read, hash, write, fsync, link, directory
 * sync) against `sha256sum` of the same file (read and hash only), alternating over rounds in one
 * run (each round on a fresh file), printed as a throughput ratio (stage MiB/s ÷ sha256sum MiB/s: above 1 is faster); a
 * durable `dd` copy of the same file is printed as a reference for what the disk allows (staging
 * is bounded by the slower of hashing and writing). The file is generated in a temporary
 * directory and removed afterwards. Set BENCH_STORE_MIB to change the size, BENCH_STORE_ROUNDS the rounds.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as ChildProcess from "node:child_process"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Store from "../src/services/Store.js"

import { isMain } from "./peer/Main.js"

const fmt = (bytes: number, ms: number) => `${(bytes / 1024 / 1024 / (ms / 1000)).toFixed(0)} MiB/s`

export interface StagingMeasurement {
  readonly bytes: number
  readonly dir: string
  readonly sha256sumMs: number
  readonly stageMs: number
  readonly ddMs: number
}

/**
 * One measurement on a fresh `mib` MiB file in a temporary directory (removed afterwards):
 * `sha256sum` (page cache warm), `Store.stage`, then the durable `dd` copy.
 */
export const measureStaging = async (mib: number): Promise<StagingMeasurement> => {
  const size = mib * 1024 * 1024
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "nativegen-bench-store-"))
  try {
    const source = Path.join(dir, "source.bin")
    // Incompressible content from a counter-mode keystream, written in 8 MiB blocks.
    const cipher = Crypto.createCipheriv("aes-128-ctr", Buffer.alloc(16, 7), Buffer.alloc(16, 0))
    const fd = Fs.openSync(source, "w")
    const block = Buffer.alloc(8 * 1024 * 1024)
    for (let written = 0; written < size; written += block.length) {
      Fs.writeSync(fd, cipher.update(block), 0, Math.min(block.length, size - written))
    }
    Fs.fsyncSync(fd)
    Fs.closeSync(fd)

    // Warm the page cache once so that both measurements read from memory.
    ChildProcess.execFileSync("sha256sum", [source])

    let t = performance.now()
    const line = ChildProcess.execFileSync("sha256sum", [source], { encoding: "utf8" })
    const sha256sumMs = performance.now() - t
    const digest = `sha256:${line.slice(0, 64)}`

    const layer = Store.layer.pipe(Layer.provide(Store.StoreConfig.layer({ root: Path.join(dir, "store"), trustSeedKey: false })))
    const stageMs = await Effect.runPromise(
      Effect.gen(function*() {
        const store = yield* Store.Store
        const start = performance.now()
        yield* store.stage(source, digest, size)
        return performance.now() - start
      }).pipe(Effect.provide(layer), Logger.withMinimumLogLevel(LogLevel.Warning))
    )

    // Reference: a plain durable copy (no hashing) shows what the disk allows for the write half.
    t = performance.now()
    ChildProcess.execFileSync("dd", [`if=${source}`, `of=${Path.join(dir, "copy.bin")}`, "bs=1M", "conv=fsync"], { stdio: "ignore" })
    const ddMs = performance.now() - t
    Fs.rmSync(Path.join(dir, "copy.bin"))
    return { bytes: size, dir, sha256sumMs, stageMs, ddMs }
  } finally {
    Fs.rmSync(dir, { recursive: true, force: true })
  }
}

if (isMain(import.meta.url)) {
  const mib = Number(process.env.BENCH_STORE_MIB ?? 1024)
  const rounds = Number(process.env.BENCH_STORE_ROUNDS ?? 3)
  // Alternating rounds, each on a fresh file: the ratio is taken per round (both halves see the
  // same load), then the median.
  const ratios: Array<number> = []
  for (let round = 0; round < rounds; round++) {
    const { bytes: size, ddMs, sha256sumMs, stageMs } = await measureStaging(mib)
    ratios.push(sha256sumMs / stageMs)
    console.log(
      `round ${round + 1}: sha256sum ${sha256sumMs.toFixed(0)} ms (${fmt(size, sha256sumMs)}), Store.stage ${stageMs.toFixed(0)} ms (${
        fmt(size, stageMs)
      }, with write, fsync, link and directory fsync); reference dd conv=fsync (copy, no hash) ${ddMs.toFixed(0)} ms (${fmt(size, ddMs)})`
    )
  }
  const sorted = [...ratios].sort((a, b) => a - b)
  console.log(`file: ${mib} MiB; load average ${Fs.readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ")}`)
  console.log(
    `throughput ratio Store.stage / sha256sum (higher is faster): median ${sorted[Math.floor(sorted.length / 2)]!.toFixed(2)} (range ${
      sorted[0]!.toFixed(2)
    }-${sorted.at(-1)!.toFixed(2)} over ${rounds} rounds)`
  )
}
