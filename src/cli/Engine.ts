/**
 * `nativegen engine build [--gpu cuda|vulkan|cpu]`: builds llama.cpp for this machine, offline,
 * from the source node-llama-cpp ships (`llama/gitRelease.bundle`), with node-llama-cpp's own
 * `source download --skipBuild` and `source build` (CMake, a C++ compiler and, for CUDA, the CUDA
 * toolkit; for CUDA the build targets the GPUs present, GGML_NATIVE). The build is kept where
 * node-llama-cpp keeps local builds (`node_modules/node-llama-cpp/llama/localBuilds/<platform>-<gpu>`),
 * and engine children find it there: node-llama-cpp loads a local build of the asked backend
 * before its prebuilt one, so `--backend auto` (whose probe child loads the same way) prefers it.
 * `--dry-run` prints the commands instead of running them.
 */
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Console from "effect/Console"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import { createRequire } from "node:module"
import * as Path from "node:path"

const gpus = ["cuda", "vulkan", "cpu"] as const
export type BuildGpu = typeof gpus[number]

/** A build step exited non-zero (its output went to the terminal). */
export class EngineBuildFailed extends Data.TaggedError("EngineBuildFailed")<{
  readonly step: string
  readonly exit: string
}> {
  override get message() {
    return `engine build: ${this.step} ${this.exit} (its output is above)`
  }
}

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

export interface BuildStep {
  readonly name: string
  readonly args: ReadonlyArray<string>
}

/** The steps: the source from the shipped bundle when not yet there, then the build for `gpu`. */
export const buildSteps = (gpu: BuildGpu, packageDir: string): ReadonlyArray<BuildStep> => {
  const cli = Path.join(packageDir, "dist", "cli", "cli.js")
  const sourcePresent = Fs.existsSync(Path.join(packageDir, "llama", "llama.cpp", ".git"))
  return [
    ...(sourcePresent ? [] : [{ name: "source download", args: [cli, "source", "download", "--skipBuild", "--noUsageExample"] }]),
    { name: "source build", args: [cli, "source", "build", "--gpu", gpu === "cpu" ? "false" : gpu, "--noUsageExample"] }
  ]
}

/** Where node-llama-cpp puts the build of `gpu` on this platform. */
export const buildDirectory = (gpu: BuildGpu, packageDir: string): string =>
  Path.join(packageDir, "llama", "localBuilds", `${process.platform}-${process.arch}${gpu === "cpu" ? "" : `-${gpu}`}`)

const runStep = (step: BuildStep) =>
  Effect.async<void, EngineBuildFailed>((resume) => {
    const child = ChildProcess.spawn(process.execPath, step.args, { stdio: "inherit" })
    child.once("error", (cause) => resume(Effect.fail(new EngineBuildFailed({ step: step.name, exit: cause.message }))))
    child.once("exit", (code, signal) =>
      resume(
        code === 0
          ? Effect.void
          : Effect.fail(new EngineBuildFailed({
            step: step.name,
            exit: signal !== null ? `killed by ${signal}` : `exited with code ${code}`
          }))
      )
    )
    return Effect.sync(() => child.kill("SIGTERM"))
  })

export const build = (settings: { readonly gpu: BuildGpu; readonly dryRun: boolean }) =>
  Effect.gen(function*() {
    const packageDir = nodeLlamaCppDirectory()
    const steps = buildSteps(settings.gpu, packageDir)
    const target = buildDirectory(settings.gpu, packageDir)
    if (settings.dryRun) {
      for (const step of steps) yield* Console.log([process.execPath, ...step.args].join(" "))
      return yield* Console.log(`# the build would be kept in ${target}`)
    }
    const started = Date.now()
    yield* Effect.forEach(steps, runStep, { discard: true })
    yield* Console.log(
      `engine build (${settings.gpu}) done in ${Math.round((Date.now() - started) / 1000)} s: ${target}; ` +
        `serve --backend ${settings.gpu === "cpu" ? "cpu" : `${settings.gpu} (or auto)`} uses it`
    )
  })

export const buildCommand = Command.make("build", {
  gpu: Options.choice("gpu", gpus).pipe(
    Options.withDescription("Backend to build llama.cpp for (cpu: a build tuned for this machine's CPU)"),
    Options.withDefault("cuda" as const)
  ),
  dryRun: Options.boolean("dry-run").pipe(Options.withDescription("Print the commands instead of running them"))
}, build).pipe(
  Command.withDescription("Build llama.cpp for this machine from the source node-llama-cpp ships (offline)")
)

export const command = Command.make("engine").pipe(
  Command.withDescription("The inference engine's builds"),
  Command.withSubcommands([buildCommand])
)
