/**
 * Backend selection for `--backend auto`: CUDA, then Vulkan, then the CPU, whichever loads and
 * passes a warm-up step in a throwaway probe child (probe.ts). A backend whose driver is absent
 * (no NVIDIA driver, no Vulkan ICD) is skipped without spawning anything; the CPU is the
 * fallback and needs no probe. Host code: it spawns probes but never loads native code, and the
 * probes get the same environment as engine children (ChildEnvironment.ts), driver variables
 * included, so what a probe proves holds for the engine child started next.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import { fileURLToPath } from "node:url"
import { childEnvironment } from "./ChildEnvironment.js"
import type { ChildSettings } from "./ChildSettings.js"
import type { Backend } from "./Protocol.js"

/** What `--backend` accepts: a backend, or `auto`. */
export type BackendChoice = Backend | "auto"

/** The order `auto` tries. */
export const autoOrder: ReadonlyArray<Backend> = ["cuda", "vulkan"]

/** What a passing probe printed. */
export interface ProbeReport {
  readonly backend: Backend
  readonly build: string
  readonly release: string
  readonly devices: ReadonlyArray<string>
  readonly milliseconds: number
}

export type ProbeOutcome =
  | { readonly _tag: "Passed"; readonly backend: Backend; readonly report: ProbeReport }
  | { readonly _tag: "Skipped"; readonly backend: Backend; readonly reason: string }
  | { readonly _tag: "Failed"; readonly backend: Backend; readonly reason: string }

export interface Selection {
  readonly backend: Backend
  readonly outcomes: ReadonlyArray<ProbeOutcome>
}

export interface ProbeOptions {
  readonly settings: ChildSettings
  /** Variables for children only (as NativeWorkerConfig.childEnv), e.g. VK_DRIVER_FILES. */
  readonly childEnv?: Readonly<Record<string, string>> | undefined
  /** Longest a probe may take (loading a GPU build, its first kernels). Default 90 s. */
  readonly timeout?: Duration.DurationInput | undefined
  /** Where drivers leave their marks; overridable in tests. Default the real paths. */
  readonly driverPresent?: ((backend: Backend, env: Readonly<Record<string, string>>) => string | undefined) | undefined
}

const vulkanIcdDirs = [
  "/usr/share/vulkan/icd.d",
  "/etc/vulkan/icd.d",
  "/usr/local/share/vulkan/icd.d",
  "/usr/local/nvidia/share/vulkan/icd.d"
]

const hasJson = (dir: string) => {
  try {
    return Fs.readdirSync(dir).some((name) => name.endsWith(".json"))
  } catch {
    return false
  }
}

/**
 * Why a backend cannot be present here, from files alone (no library is loaded): undefined when
 * its driver is there. CUDA needs the NVIDIA kernel driver; Vulkan an ICD manifest.
 */
export const driverAbsence = (backend: Backend, env: Readonly<Record<string, string>>): string | undefined => {
  switch (backend) {
    case "cuda":
      return Fs.existsSync("/proc/driver/nvidia/version") || Fs.existsSync("/dev/nvidiactl")
        ? undefined
        : "no NVIDIA driver (/proc/driver/nvidia/version absent)"
    case "vulkan":
      return env.VK_DRIVER_FILES !== undefined || env.VK_ICD_FILENAMES !== undefined || vulkanIcdDirs.some(hasJson)
        ? undefined
        : `no Vulkan ICD (VK_DRIVER_FILES unset, none in ${vulkanIcdDirs.join(", ")})`
    case "metal":
      return process.platform === "darwin" ? undefined : "Metal needs macOS"
    case "cpu":
      return undefined
  }
}

/**
 * How a probe is started, as the engine child is (ChildProcess.ts): compiled, the `probe.js`
 * beside this module; from the sources, `bin/engine-child.js probe`, the build of the sources as
 * they are now.
 */
const probeArguments: ReadonlyArray<string> = import.meta.url.endsWith(".js")
  ? [fileURLToPath(new URL("./probe.js", import.meta.url))]
  : [fileURLToPath(new URL("../../bin/engine-child.js", import.meta.url)), "probe"]

/** Vulkan on the CPU (Mesa's llvmpipe, SwiftShader): it passes a probe but is slower than the CPU backend. */
export const isSoftwareDevice = (name: string): boolean => /llvmpipe|lavapipe|swiftshader/i.test(name)

const lastLine = (text: string) => text.trim().split("\n").filter((l) => l.trim() !== "").at(-1) ?? ""

/** Runs one probe child for `backend`; it is killed (its whole group) if interrupted or late. */
export const probe = (backend: Backend, options: ProbeOptions): Effect.Effect<ProbeOutcome> => {
  const env = childEnvironment(process.env, { ...options.settings, backend }, options.childEnv)
  const absent = (options.driverPresent ?? driverAbsence)(backend, env)
  if (absent !== undefined) return Effect.succeed({ _tag: "Skipped", backend, reason: absent })
  const timeout = Duration.toMillis(Duration.decode(options.timeout ?? Duration.seconds(90)))
  return Effect.async<ProbeOutcome>((resume) => {
    const child = ChildProcess.spawn(process.execPath, probeArguments, {
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
      env
    })
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString("utf8")))
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")))
    const kill = () => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL")
      } catch {
        // Already gone.
      }
    }
    const timer = setTimeout(kill, timeout)
    child.once("error", (cause) => {
      clearTimeout(timer)
      resume(Effect.succeed({ _tag: "Failed", backend, reason: `cannot start the probe: ${cause.message}` }))
    })
    child.once("close", (code, signal) => {
      clearTimeout(timer)
      if (code === 0) {
        try {
          const report = JSON.parse(lastLine(stdout)) as ProbeReport
          if (backend !== "cpu" && report.devices.length > 0 && report.devices.every(isSoftwareDevice)) {
            const reason = `only a software renderer (${report.devices.join(", ")})`
            return resume(Effect.succeed({ _tag: "Skipped", backend, reason }))
          }
          return resume(Effect.succeed({ _tag: "Passed", backend, report }))
        } catch {
          return resume(Effect.succeed({ _tag: "Failed", backend, reason: `unreadable probe report: ${lastLine(stdout)}` }))
        }
      }
      const how = signal !== null ? `killed by ${signal}` : `exited with code ${code}`
      const why = lastLine(stderr)
      resume(Effect.succeed({ _tag: "Failed", backend, reason: why === "" ? `probe ${how}` : `probe ${how}: ${why}` }))
    })
    return Effect.sync(() => {
      clearTimeout(timer)
      kill()
    })
  })
}

/**
 * The backend to start engine children with: the choice itself when it names one, else the first
 * of `autoOrder` whose probe passes, else the CPU. Every outcome is returned for the log.
 */
export const select = (choice: BackendChoice, options: ProbeOptions): Effect.Effect<Selection> =>
  choice !== "auto"
    ? Effect.succeed({ backend: choice, outcomes: [] })
    : Effect.gen(function*() {
      const outcomes: Array<ProbeOutcome> = []
      for (const backend of autoOrder) {
        const outcome = yield* probe(backend, options)
        outcomes.push(outcome)
        if (outcome._tag === "Passed") return { backend, outcomes }
      }
      return { backend: "cpu" as const, outcomes }
    })

export const describeOutcome = (outcome: ProbeOutcome): string =>
  outcome._tag === "Passed"
    ? `${outcome.backend}: passed in ${outcome.report.milliseconds} ms (${outcome.report.build} build, ${outcome.report.devices.join(", ") || "no device names"})`
    : `${outcome.backend}: ${outcome._tag === "Skipped" ? "skipped" : "failed"}, ${outcome.reason}`
