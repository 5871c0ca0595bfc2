/**
 * llama.cpp's own server as the peer: built once, offline, from exactly the llama.cpp source that
 * node-llama-cpp ships (`node_modules/node-llama-cpp/llama/gitRelease.bundle`) into a cache
 * directory shared by every checkout, and run as a scoped child on a free loopback port.
 *
 * Fairness: node-llama-cpp's prebuilt CPU binary is built with GGML_NATIVE=OFF, OpenMP off and
 * every x86 CPU variant as a loadable backend, of which ggml loads the one with the most features
 * this CPU has. We build llama-server with that one variant's instruction-set flags (read from
 * ggml's own variant list), GGML_NATIVE=OFF and OpenMP off, linked statically: the same kernels
 * compiled the same way, without building the thirteen variants this machine would never load.
 */
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Net from "node:net"
import * as Os from "node:os"
import * as Path from "node:path"

/** Why llama-server cannot be built here (a missing tool, or no bundle): the peer figures are skipped. */
export class LlamaServerUnavailable extends Data.TaggedError("LlamaServerUnavailable")<{ readonly reason: string }> {
  override get message() {
    return `llama-server cannot be built here: ${this.reason}`
  }
}

export class LlamaServerBuildFailed extends Data.TaggedError("LlamaServerBuildFailed")<{
  readonly step: string
  readonly log: string
}> {
  override get message() {
    return `building llama-server failed at ${this.step} (log: ${this.log})`
  }
}

export class LlamaServerStartFailed extends Data.TaggedError("LlamaServerStartFailed")<{
  readonly reason: string
  readonly output: string
}> {
  override get message() {
    return `llama-server did not become healthy: ${this.reason}\n${this.output.slice(-2000)}`
  }
}

// ---------------------------------------------------------------------------------------------
// Where: the release and the cache directory
// ---------------------------------------------------------------------------------------------

export const llamaDir = (projectRoot: string) => Path.join(projectRoot, "node_modules", "node-llama-cpp", "llama")

/** The llama.cpp release node-llama-cpp ships (its `binariesGithubRelease.json`). */
export const release = (projectRoot: string): string => {
  const file = Path.join(llamaDir(projectRoot), "binariesGithubRelease.json")
  const parsed = JSON.parse(Fs.readFileSync(file, "utf8")) as { release?: unknown }
  if (typeof parsed.release !== "string" || !/^[\w.-]+$/.test(parsed.release)) {
    throw new Error(`${file}: no usable "release" (${JSON.stringify(parsed.release)})`)
  }
  return parsed.release
}

/** `NATIVEGEN_LLAMA_SERVER_DIR`, else `${XDG_CACHE_HOME:-~/.cache}/nativegen/llama-server/<release>`. */
export const cacheDir = (releaseName: string, env: NodeJS.ProcessEnv = process.env): string => {
  const override = env.NATIVEGEN_LLAMA_SERVER_DIR
  if (override !== undefined && override !== "") return Path.resolve(override)
  const cache = env.XDG_CACHE_HOME !== undefined && env.XDG_CACHE_HOME !== "" ? env.XDG_CACHE_HOME : Path.join(Os.homedir(), ".cache")
  return Path.join(cache, "nativegen", "llama-server", releaseName)
}

// ---------------------------------------------------------------------------------------------
// What: the CPU variant and the cmake arguments
// ---------------------------------------------------------------------------------------------

/** One of ggml's x86 CPU backend variants: its name and the GGML_* features it turns on. */
export interface CpuVariant {
  readonly name: string
  readonly features: ReadonlyArray<string>
}

/** Every GGML_* feature a variant may set; those it does not name are turned off. */
export const x86Features = [
  "SSE42", "AVX", "AVX2", "BMI2", "AVX_VNNI", "FMA", "F16C",
  "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16", "AMX_TILE", "AMX_INT8", "AMX_BF16"
] as const

/** The /proc/cpuinfo flag that shows each feature. */
const cpuinfoFlag: Record<typeof x86Features[number], string> = {
  SSE42: "sse4_2",
  AVX: "avx",
  AVX2: "avx2",
  BMI2: "bmi2",
  AVX_VNNI: "avx_vnni",
  FMA: "fma",
  F16C: "f16c",
  AVX512: "avx512f",
  AVX512_VBMI: "avx512vbmi",
  AVX512_VNNI: "avx512_vnni",
  AVX512_BF16: "avx512_bf16",
  AMX_TILE: "amx_tile",
  AMX_INT8: "amx_int8",
  AMX_BF16: "amx_bf16"
}

/**
 * The x86 variants of `GGML_CPU_ALL_VARIANTS` from ggml/src/CMakeLists.txt: the
 * `ggml_add_cpu_backend_variant(name FEATURES...)` calls of its `GGML_SYSTEM_ARCH STREQUAL "x86"` branch.
 */
export const parseX86Variants = (cmakeLists: string): ReadonlyArray<CpuVariant> => {
  const start = cmakeLists.indexOf("if (GGML_SYSTEM_ARCH STREQUAL \"x86\")", cmakeLists.indexOf("if (GGML_CPU_ALL_VARIANTS)"))
  if (start < 0) return []
  const end = cmakeLists.indexOf("elseif", start)
  const section = cmakeLists.slice(start, end < 0 ? undefined : end)
  const variants: Array<CpuVariant> = []
  for (const match of section.matchAll(/^\s*ggml_add_cpu_backend_variant\(([^)]*)\)/gm)) {
    const [name, ...features] = match[1]!.trim().split(/\s+/)
    if (name !== undefined && name !== "") variants.push({ name, features })
  }
  return variants
}

/** The flags of the first processor in /proc/cpuinfo's text. */
export const parseCpuFlags = (cpuinfo: string): ReadonlySet<string> => {
  const line = /^flags\s*:\s*(.*)$/m.exec(cpuinfo)
  return new Set(line === null ? [] : line[1]!.trim().split(/\s+/))
}

/**
 * The variant ggml's loader picks on a CPU with `flags`: among those whose every feature the CPU
 * has, the one with the most features (ggml scores each supported feature; the later one of a tie,
 * as the loader keeps the first best and the list grows in capability).
 */
export const chooseVariant = (variants: ReadonlyArray<CpuVariant>, flags: ReadonlySet<string>): CpuVariant | undefined => {
  let best: CpuVariant | undefined
  for (const variant of variants) {
    const supported = variant.features.every((f) => {
      const flag = cpuinfoFlag[f as typeof x86Features[number]]
      return flag !== undefined && flags.has(flag)
    })
    if (supported && (best === undefined || variant.features.length > best.features.length)) best = variant
  }
  return best
}

/** The cmake configure arguments: a static Release build of llama-server with `variant`'s flags (or GGML_NATIVE where no variant applies). */
export const cmakeArguments = (options: {
  readonly source: string
  readonly build: string
  readonly generator: "Ninja" | "Unix Makefiles"
  readonly variant: CpuVariant | undefined
  readonly extra?: ReadonlyArray<string>
}): ReadonlyArray<string> => [
  "-S", options.source,
  "-B", options.build,
  "-G", options.generator,
  "-DCMAKE_BUILD_TYPE=Release",
  "-DBUILD_SHARED_LIBS=OFF",
  "-DGGML_BACKEND_DL=OFF",
  "-DGGML_OPENMP=OFF",
  "-DGGML_CCACHE=OFF",
  "-DGGML_BUILD_NUMBER=1",
  "-DLLAMA_CURL=OFF",
  "-DLLAMA_OPENSSL=OFF",
  "-DLLAMA_BUILD_TESTS=OFF",
  "-DLLAMA_BUILD_EXAMPLES=OFF",
  "-DLLAMA_BUILD_SERVER=ON",
  ...(options.variant === undefined
    ? ["-DGGML_NATIVE=ON"]
    : ["-DGGML_NATIVE=OFF", ...x86Features.map((f) => `-DGGML_${f}=${options.variant!.features.includes(f) ? "ON" : "OFF"}`)]),
  ...(options.extra ?? [])
]

// ---------------------------------------------------------------------------------------------
// Building once
// ---------------------------------------------------------------------------------------------

export interface Built {
  readonly binary: string
  readonly release: string
  readonly cpuVariant: string
  readonly cmakeArguments: ReadonlyArray<string>
}

const which = (command: string): string | undefined => {
  const found = ChildProcess.spawnSync("sh", ["-c", `command -v ${command}`], { encoding: "utf8" })
  return found.status === 0 ? found.stdout.trim() : undefined
}

const runLogged = (step: string, command: string, args: ReadonlyArray<string>, log: string, cwd?: string) =>
  Effect.async<void, LlamaServerBuildFailed>((resume) => {
    const fd = Fs.openSync(log, "a")
    Fs.writeSync(fd, `\n$ ${command} ${args.join(" ")}\n`)
    const child = ChildProcess.spawn("nice", ["-n", "10", command, ...args], { cwd, stdio: ["ignore", fd, fd] })
    child.on("error", () => resume(Effect.fail(new LlamaServerBuildFailed({ step, log }))))
    child.on("close", (code) => {
      Fs.closeSync(fd)
      resume(code === 0 ? Effect.void : Effect.fail(new LlamaServerBuildFailed({ step, log })))
    })
    return Effect.sync(() => void child.kill("SIGKILL"))
  })

/**
 * llama-server in the cache directory, built there first if it is not (clone of the bundle, cmake
 * configure, build of the `llama-server` target only; several minutes). `build.json` beside the
 * binary records the variant and the cmake arguments it was built with.
 */
export const ensureBuilt = (projectRoot: string, env: NodeJS.ProcessEnv = process.env) =>
  Effect.gen(function*() {
    const releaseName = release(projectRoot)
    const dir = cacheDir(releaseName, env)
    const binary = Path.join(dir, "bin", "llama-server")
    const stamp = Path.join(dir, "bin", "build.json")
    if (Fs.existsSync(binary) && Fs.existsSync(stamp)) {
      const recorded = JSON.parse(Fs.readFileSync(stamp, "utf8")) as Omit<Built, "binary">
      return { ...recorded, binary } satisfies Built
    }
    const bundle = Path.join(llamaDir(projectRoot), "gitRelease.bundle")
    if (!Fs.existsSync(bundle)) return yield* new LlamaServerUnavailable({ reason: `no ${bundle}` })
    const missing = ["git", "cmake"].filter((c) => which(c) === undefined)
    if (which("c++") === undefined && which("g++") === undefined && which("clang++") === undefined) missing.push("a C++ compiler (c++, g++ or clang++)")
    const ninja = which("ninja") !== undefined
    if (!ninja && which("make") === undefined) missing.push("ninja or make")
    if (missing.length > 0) return yield* new LlamaServerUnavailable({ reason: `missing ${missing.join(", ")}` })

    const source = Path.join(dir, "src")
    const build = Path.join(dir, "build")
    const log = Path.join(dir, "build.log")
    Fs.mkdirSync(dir, { recursive: true })
    if (!Fs.existsSync(Path.join(source, "CMakeLists.txt"))) {
      Fs.rmSync(source, { recursive: true, force: true })
      yield* runLogged("clone", "git", ["clone", "--quiet", bundle, source], log)
    }
    const variants = Os.arch() === "x64" ? parseX86Variants(Fs.readFileSync(Path.join(source, "ggml", "src", "CMakeLists.txt"), "utf8")) : []
    const variant = chooseVariant(variants, parseCpuFlags(Fs.existsSync("/proc/cpuinfo") ? Fs.readFileSync("/proc/cpuinfo", "utf8") : ""))
    const args = cmakeArguments({ source, build, generator: ninja ? "Ninja" : "Unix Makefiles", variant })
    const jobs = String(Math.max(1, Os.availableParallelism()))
    console.log(`building llama-server ${releaseName} (${variant?.name ?? "native"} variant) in ${dir}: several minutes; log ${log}`)
    yield* runLogged("configure", "cmake", args, log)
    yield* runLogged("build", "cmake", ["--build", build, "--target", "llama-server", "--parallel", jobs], log)
    Fs.mkdirSync(Path.dirname(binary), { recursive: true })
    Fs.copyFileSync(Path.join(build, "bin", "llama-server"), binary)
    Fs.chmodSync(binary, 0o755)
    const built: Omit<Built, "binary"> = { release: releaseName, cpuVariant: variant?.name ?? "native", cmakeArguments: args }
    Fs.writeFileSync(stamp, JSON.stringify(built, null, 2) + "\n")
    return { ...built, binary } satisfies Built
  })

// ---------------------------------------------------------------------------------------------
// Running it
// ---------------------------------------------------------------------------------------------

export interface ServerSettings {
  readonly model: string
  readonly port: number
  readonly threads: number
  readonly contextSize: number
  readonly batchSize: number
  /** `--parallel`; absent: llama-server's default (auto). */
  readonly parallel?: number
  /** `--n-gpu-layers`; absent or 0: the CPU. */
  readonly gpuLayers?: number
}

/**
 * llama-server's command line: the model, loopback port, threads for decode and prefill alike,
 * context and batch as nativegen's engine child has them, greedy by default, no web UI, the
 * model's own chat template (jinja), quiet.
 */
export const serverArguments = (s: ServerSettings): ReadonlyArray<string> => [
  "--model", s.model,
  "--host", "127.0.0.1",
  "--port", String(s.port),
  "--threads", String(s.threads),
  "--threads-batch", String(s.threads),
  "--ctx-size", String(s.contextSize),
  "--batch-size", String(s.batchSize),
  "--temp", "0",
  "--seed", "1",
  "--jinja",
  "--no-webui",
  "--log-disable",
  ...(s.parallel === undefined ? [] : ["--parallel", String(s.parallel)]),
  ...(s.gpuLayers === undefined || s.gpuLayers === 0 ? [] : ["--n-gpu-layers", String(s.gpuLayers)])
]

/** A free TCP port on 127.0.0.1 (bound and released; the server binds it next). */
export const freePort = Effect.async<number>((resume) => {
  const server = Net.createServer()
  server.listen(0, "127.0.0.1", () => {
    const address = server.address()
    const port = typeof address === "object" && address !== null ? address.port : 0
    server.close(() => resume(Effect.succeed(port)))
  })
})

export interface Running {
  readonly url: string
  readonly pid: number
}

/** llama-server for the scope: started, healthy (`GET /health` 200, bounded poll), SIGKILLed at the end. */
export const start = (binary: string, settings: Omit<ServerSettings, "port">): Effect.Effect<Running, LlamaServerStartFailed, Scope.Scope> =>
  Effect.gen(function*() {
    const port = yield* freePort
    let output = ""
    let exited: number | null | undefined
    const child = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const child = ChildProcess.spawn(binary, serverArguments({ ...settings, port }), { stdio: ["ignore", "pipe", "pipe"] })
        const keep = (s: string) => (output = (output + s).slice(-20_000))
        child.stdout.setEncoding("utf8").on("data", keep)
        child.stderr.setEncoding("utf8").on("data", keep)
        child.on("close", (code) => (exited = code))
        return child
      }),
      (child) =>
        Effect.async<void>((resume) => {
          if (exited !== undefined) return resume(Effect.void)
          child.once("close", () => resume(Effect.void))
          child.kill("SIGKILL")
        })
    )
    const url = `http://127.0.0.1:${port}`
    const health: Effect.Effect<void, string | LlamaServerStartFailed> = Effect.suspend((): Effect.Effect<void, string | LlamaServerStartFailed> =>
      exited !== undefined
        ? Effect.fail(new LlamaServerStartFailed({ reason: `it exited with status ${exited}`, output }))
        : Effect.tryPromise({ try: () => fetch(`${url}/health`), catch: (e) => String(e) }).pipe(
          Effect.flatMap((response) => (response.ok ? Effect.void : Effect.fail(`status ${response.status}`)))
        )
    )
    yield* health.pipe(
      Effect.retry({ schedule: Schedule.spaced("100 millis").pipe(Schedule.upTo("120 seconds")), while: (e) => typeof e === "string" }),
      Effect.mapError((e) => typeof e === "string" ? new LlamaServerStartFailed({ reason: `no healthy /health within 120 s (${e})`, output }) : e)
    )
    return { url, pid: child.pid! }
  })
