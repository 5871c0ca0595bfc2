/**
 * `threads: "auto"`: the setting crosses the environment as text, and a real engine child given it
 * evaluates with llama.cpp's own count for this machine, the physical cores (on Linux, the distinct
 * sibling sets under /sys/devices/system/cpu; a hybrid CPU would count only its performance cores,
 * so the comparison is made where no CPU says it is an efficiency core), and says so in its hello
 * with the llama.cpp binary it loaded.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { spawn } from "../../src/native/ChildProcess.js"
import { childSettingsFromEnv, childSettingsToEnv, parseThreads } from "../../src/native/ChildSettings.js"
import { testChild, testRunEnv } from "../support/engine.js"

const cpuRoot = "/sys/devices/system/cpu"

/** Physical cores from sysfs: one per distinct set of hardware-thread siblings; undefined where sysfs does not say. */
const physicalCores = (): number | undefined => {
  if (!Fs.existsSync(cpuRoot)) return undefined
  const sets = new Set<string>()
  for (const entry of Fs.readdirSync(cpuRoot)) {
    const file = Path.join(cpuRoot, entry, "topology", "thread_siblings_list")
    if (/^cpu\d+$/.test(entry) && Fs.existsSync(file)) sets.add(Fs.readFileSync(file, "utf8").trim())
  }
  return sets.size === 0 ? undefined : sets.size
}

/** Whether the kernel lists hybrid core types (Intel's cpu_core/cpu_atom PMUs). */
const hybrid = Fs.existsSync("/sys/devices/cpu_atom")

describe("threads auto", () => {
  it("parses auto or a positive count, and crosses the child's environment unchanged", () => {
    assert.strictEqual(parseThreads("auto"), "auto")
    assert.strictEqual(parseThreads("AUTO"), "auto")
    assert.strictEqual(parseThreads("3"), 3)
    for (const bad of ["0", "-1", "1.5", "", "many"]) assert.isUndefined(parseThreads(bad), bad)
    for (const threads of ["auto", 1, 7] as const) {
      assert.strictEqual(childSettingsFromEnv(childSettingsToEnv({ ...testChild, threads })).threads, threads)
    }
  })

  it.scoped.skipIf(physicalCores() === undefined || hybrid)(
    "a child given auto evaluates with the physical cores and says so in its hello",
    () =>
      Effect.gen(function*() {
        const child = yield* spawn({ settings: { ...testChild, threads: "auto" }, env: testRunEnv, stopTimeout: Duration.seconds(3) })
        const hello = yield* child.client.Hello()
        assert.strictEqual(hello.threads, physicalCores())
        assert.oneOf(hello.build, ["localBuild", "prebuilt"])
      }),
    { timeout: 60_000 }
  )
})
