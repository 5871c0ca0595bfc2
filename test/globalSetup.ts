/**
 * Once per test run: generate the named test models into the cache (workers then find them
 * verified), build the sources for the command line and engine children (bin/sources-build.js),
 * mark this run in the environment that every engine child inherits, and after the run fail if
 * any engine child of this run outlived the suite.
 */
import * as Crypto from "node:crypto"
import * as Fs from "node:fs"
import { currentBuild } from "../bin/sources-build.js"
import { ensureModel, type ModelName } from "../fixtures/models.js"

const marker = `NATIVEGEN_TEST_RUN=${Crypto.randomUUID()}`

/**
 * Every cached model the suite loads (the quantizer's probe models are written per test, and the
 * benchmark models only by the benchmarks). From an empty cache: 4.2 s of CPU time (0.8 s of it
 * reading Qwen3's tokenizer once), 177 MB; from a warm one, only the hashes.
 */
const suiteModels = [
  "tiny",
  "decision",
  "small",
  "qwen-chat",
  "qwen-decision",
  "qwen-broken",
  "qwen-chat-q8_0",
  "qwen-chat-f32",
  "qwen-tool"
] as const satisfies ReadonlyArray<ModelName>

/** How an engine child's command line names its entry point. */
const childEntries = [/bin\/engine-child\.js/, /\.cache\/build\/[0-9a-f]+\/child\.js/, /src\/native\/child\.js/]

/** Live processes whose environment carries this run's marker. */
const processesOfThisRun = (): Array<number> =>
  Fs.readdirSync("/proc")
    .filter((entry) => /^\d+$/.test(entry) && Number(entry) !== process.pid)
    .filter((pid) => {
      try {
        return Fs.readFileSync(`/proc/${pid}/environ`, "utf8").split("\0").includes(marker)
      } catch {
        return false
      }
    })
    .map(Number)
    .filter((pid) => {
      try {
        // From the sources (bin/engine-child.js), the repository's build, or compiled
        // (test/package/pack.test.ts runs the installed package).
        const cmdline = Fs.readFileSync(`/proc/${pid}/cmdline`, "utf8")
        return childEntries.some((entry) => entry.test(cmdline))
      } catch {
        return false
      }
    })

export const setup = async () => {
  const [key, value] = marker.split("=") as [string, string]
  process.env[key] = value
  for (const name of suiteModels) ensureModel(name)
  // Built once here, not by the first engine children of several workers at once.
  await currentBuild()
}

export const teardown = () => {
  const left = processesOfThisRun()
  if (left.length > 0) throw new Error(`engine children outlived the test suite: pids ${left.join(", ")}`)
}
