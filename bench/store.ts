/**
 * Staging throughput: `Store.stage` of a 1 GiB file (read, hash, write, fsync, link, directory
 * sync) against `sha256sum` of the same file (read and hash only), alternating over rounds in one
 * run, printed as a throughput ratio (stage MiB/s ÷ sha256sum MiB/s: above 1 is faster); a
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

const mib = Number(process.env.BENCH_STORE_MIB ?? 1024)
const rounds = Number(process.env.BENCH_STORE_ROUNDS ?? 3)
const size = mib * 1024 * 1024
const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "nativegen-bench-store-"))

const fmt = (bytes: number, ms: number) => `${(bytes / 1024 / 1024 / (ms / 1000)).toFixed(0)} MiB/s`

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

  // Warms the page cache once so that both measurements read from memory.
  const digest = `sha256:${ChildProcess.execFileSync("sha256sum", [source], { encoding: "utf8" }).slice(0, 64)}`
  const stageOnce = (round: number) => {
    const layer = Store.layer.pipe(
      Layer.provide(Store.StoreConfig.layer({ root: Path.join(dir, `store-${round}`), trustSeedKey: false }))
    )
    return Effect.runPromise(
      Effect.gen(function*() {
        const store = yield* Store.Store
        const start = performance.now()
        yield* store.stage(source, digest, size)
        return performance.now() - start
      }).pipe(Effect.provide(layer), Logger.withMinimumLogLevel(LogLevel.Warning))
    ).finally(() => Fs.rmSync(Path.join(dir, `store-${round}`), { recursive: true, force: true }))
  }

  // Alternating rounds: the ratio is taken per round (both halves see the same load), then the median.
  const ratios: Array<number> = []
  for (let round = 0; round < rounds; round++) {
    const t = performance.now()
    ChildProcess.execFileSync("sha256sum", [source])
    const sha256sumMs = performance.now() - t
    const stageMs = await stageOnce(round)
    ratios.push(sha256sumMs / stageMs)
    console.log(
      `round ${round + 1}: sha256sum ${sha256sumMs.toFixed(0)} ms (${fmt(size, sha256sumMs)}), Store.stage ${stageMs.toFixed(0)} ms (${
        fmt(size, stageMs)
      }, with write, fsync, link and directory fsync)`
    )
  }

  // Reference: a plain durable copy (no hashing) shows what the disk allows for the write half.
  const t = performance.now()
  ChildProcess.execFileSync("dd", [`if=${source}`, `of=${Path.join(dir, "copy.bin")}`, "bs=1M", "conv=fsync"], { stdio: "ignore" })
  const ddMs = performance.now() - t
  Fs.rmSync(Path.join(dir, "copy.bin"))

  const median = (xs: Array<number>) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
  console.log(`file: ${mib} MiB in ${dir}; load average ${Fs.readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ")}`)
  console.log(`reference, dd conv=fsync (copy, no hash): ${ddMs.toFixed(0)} ms (${fmt(size, ddMs)})`)
  console.log(
    `throughput ratio Store.stage / sha256sum (higher is faster): median ${median(ratios).toFixed(2)} (range ${
      Math.min(...ratios).toFixed(2)
    }-${Math.max(...ratios).toFixed(2)} over ${rounds} rounds)`
  )
} finally {
  Fs.rmSync(dir, { recursive: true, force: true })
}
