/**
 * `nativegen engine build [--gpu cuda|vulkan|cpu]`: builds llama.cpp for this machine, offline,
 * from the source node-llama-cpp ships (`llama/gitRelease.bundle`), with node-llama-cpp's own
 * `source download --skipBuild`, nativegen's patches (SourcePatches: `patches/llama.cpp/`) and
 * `source build` (CMake, a C++ compiler and, for CUDA, the CUDA
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
import * as Path from "node:path"
import {
  buildDirectory,
  type BuildGpu,
  buildGpus,
  nodeLlamaCppDirectory,
  recordPatches,
  sourceDirectory,
  type SourcePatch,
  sourcePatches
} from "../native/EngineBuilds.js"
import { applySourcePatch } from "./SourcePatches.js"

/** A build step exited non-zero (its output went to the terminal). */
export class EngineBuildFailed extends Data.TaggedError("EngineBuildFailed")<{
  readonly step: string
  readonly exit: string
}> {
  override get message() {
    return `engine build: ${this.step} ${this.exit} (its output is above)`
  }
}

export interface BuildStep {
  readonly name: string
  readonly args: ReadonlyArray<string>
}

const cliOf = (packageDir: string): string => Path.join(packageDir, "dist", "cli", "cli.js")

/** The source from the shipped bundle, when it is not unpacked yet. */
export const downloadSteps = (packageDir: string): ReadonlyArray<BuildStep> =>
  Fs.existsSync(Path.join(sourceDirectory(packageDir), ".git"))
    ? []
    : [{ name: "source download", args: [cliOf(packageDir), "source", "download", "--skipBuild", "--noUsageExample"] }]

/** The build for `gpu`, from the (patched) source. */
export const compileStep = (gpu: BuildGpu, packageDir: string): BuildStep => ({
  name: "source build",
  args: [cliOf(packageDir), "source", "build", "--gpu", gpu === "cpu" ? "false" : gpu, "--noUsageExample"]
})

/** nativegen's patches that belong in a build for `gpu`. */
export const patchesFor = (gpu: BuildGpu): ReadonlyArray<SourcePatch> => sourcePatches.filter((patch) => patch.gpus.includes(gpu))

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
    const downloads = downloadSteps(packageDir)
    const patches = patchesFor(settings.gpu)
    const compile = compileStep(settings.gpu, packageDir)
    const target = buildDirectory(settings.gpu, packageDir)
    const show = (step: BuildStep) => Console.log([process.execPath, ...step.args].join(" "))
    if (settings.dryRun) {
      yield* Effect.forEach(downloads, show, { discard: true })
      for (const patch of patches) yield* Console.log(`# apply nativegen's patch ${patch.name} to ${sourceDirectory(packageDir)}`)
      yield* show(compile)
      return yield* Console.log(`# the build would be kept in ${target}`)
    }
    const started = Date.now()
    yield* Effect.forEach(downloads, runStep, { discard: true })
    for (const patch of patches) {
      const outcome = yield* applySourcePatch(patch, sourceDirectory(packageDir))
      yield* Console.log(`engine build: patch ${patch.name} ${outcome}`)
    }
    yield* runStep(compile)
    yield* recordPatches(target, patches.map((patch) => patch.name))
    yield* Console.log(
      `engine build (${settings.gpu}) done in ${Math.round((Date.now() - started) / 1000)} s: ${target}; ` +
        `serve --backend ${settings.gpu === "cpu" ? "cpu" : `${settings.gpu} (or auto)`} uses it`
    )
  })

export const buildCommand = Command.make("build", {
  gpu: Options.choice("gpu", buildGpus).pipe(
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
