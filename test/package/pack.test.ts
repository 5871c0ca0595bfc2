/**
 * The package as a user installs it: `npm pack` (which builds `dist/` through `prepack`), the
 * tarball installed with `--omit=dev` into a fresh Node ESM project beside the peer dependencies at
 * our pinned versions, with no tsx and no loader; then, with plain `node`: an embedded generation
 * on the packaged seed, `npx nativegen --version`, `serve` + `status` on a temporary socket and
 * store, consumers type-checked under node16, bundler and node10 resolution, and a consumer on
 * another effect 3.x patch that resolves one copy of effect.
 *
 * Slow by nature (a full `tsc` build and two `npm install`s from the registry): minutes, not
 * seconds; the timeouts below say so.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { projectRoot } from "../../fixtures/models.js"

interface Result {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

const ours = JSON.parse(Fs.readFileSync(Path.join(projectRoot, "package.json"), "utf8")) as {
  readonly version: string
  readonly devDependencies: Readonly<Record<string, string>>
}
const pinned = (name: string): string => {
  const version = ours.devDependencies[name]
  if (version === undefined) throw new Error(`${name} is not pinned in devDependencies`)
  return `${name}@${version}`
}
/** The peers an embedder installs beside nativegen, at the versions we develop against. */
const peers = ["@effect/platform", "@effect/platform-node", "@effect/rpc"].map(pinned)
/** A different effect 3.x patch than ours, still inside our peer range. */
const otherEffect = "3.22.3"

/** Runs a command to completion; killed when the fiber is interrupted. */
const exec = (
  command: string,
  args: ReadonlyArray<string>,
  options: { readonly cwd: string; readonly env: NodeJS.ProcessEnv }
): Effect.Effect<Result> =>
  Effect.async<Result>((resume) => {
    const child = ChildProcess.spawn(command, args, { cwd: options.cwd, env: options.env, stdio: ["ignore", "pipe", "pipe"] })
    let stdout = ""
    let stderr = ""
    child.stdout.setEncoding("utf8").on("data", (s: string) => (stdout += s))
    child.stderr.setEncoding("utf8").on("data", (s: string) => (stderr += s))
    child.on("close", (code) => resume(Effect.succeed({ code, stdout, stderr })))
    return Effect.sync(() => void child.kill("SIGKILL"))
  })

const succeeded = (what: string) => (result: Result) =>
  result.code === 0
    ? Effect.succeed(result)
    : Effect.dieMessage(`${what} exited with ${result.code}:\n${result.stdout}\n${result.stderr}`)

interface Installed {
  /** A temporary directory holding everything below, removed with the layer. */
  readonly dir: string
  /** The consumer project with nativegen installed from the tarball. */
  readonly app: string
  /** A consumer project on effect `otherEffect`. */
  readonly otherApp: string
  /**
   * An environment with nothing of this repository or of vitest in it (no NODE_OPTIONS, no tsx):
   * a private HOME and XDG directories under `dir`, npm's own cache, one engine thread and small
   * contexts (the machine has two cores).
   */
  readonly env: NodeJS.ProcessEnv
}

class Package extends Context.Tag("test/Package")<Package, Installed>() {}

const npmCache = process.env["npm_config_cache"] ?? Path.join(Os.homedir(), ".npm")

const makeEnv = (dir: string): NodeJS.ProcessEnv => ({
  PATH: process.env["PATH"],
  HOME: Path.join(dir, "home"),
  XDG_DATA_HOME: Path.join(dir, "home", "data"),
  XDG_CONFIG_HOME: Path.join(dir, "home", "config"),
  XDG_CACHE_HOME: Path.join(dir, "home", "cache"),
  XDG_RUNTIME_DIR: Path.join(dir, "run"),
  npm_config_cache: npmCache,
  npm_config_update_notifier: "false",
  NO_COLOR: "1",
  // globalSetup's marker: an engine child this test leaves behind fails the suite.
  NATIVEGEN_TEST_RUN: process.env["NATIVEGEN_TEST_RUN"],
  NATIVEGEN_THREADS: "1",
  NATIVEGEN_ADMISSION_GENERATION_CONTEXT_CAP: "1024",
  NATIVEGEN_ADMISSION_DECISION_CONTEXT_CAP: "512"
})

/** A fresh ESM project with `specs` installed from the tarball and the registry, without dev dependencies or install scripts. */
const installInto = (app: string, specs: ReadonlyArray<string>, env: NodeJS.ProcessEnv) =>
  Effect.gen(function*() {
    Fs.mkdirSync(app, { recursive: true })
    Fs.writeFileSync(Path.join(app, "package.json"), JSON.stringify({ name: Path.basename(app), version: "1.0.0", private: true, type: "module" }))
    yield* exec("npm", ["install", "--omit=dev", "--ignore-scripts", "--no-audit", "--no-fund", "--prefer-offline", ...specs], { cwd: app, env })
      .pipe(Effect.flatMap(succeeded(`npm install in ${app}`)))
  })

const install = Effect.gen(function*() {
  const dir = yield* Effect.acquireRelease(
    // Short: the socket path under it must stay under 107 bytes.
    Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "ngp-"))),
    (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
  )
  const env = makeEnv(dir)
  Fs.mkdirSync(env["XDG_RUNTIME_DIR"]!, { mode: 0o700 })
  // `npm pack` runs prepack, which builds dist/.
  const packed = yield* exec("npm", ["pack", "--pack-destination", dir], { cwd: projectRoot, env: process.env })
    .pipe(Effect.flatMap(succeeded("npm pack")))
  const tarball = Path.join(dir, packed.stdout.trim().split("\n").at(-1)!)
  const app = Path.join(dir, "app")
  const otherApp = Path.join(dir, "other")
  yield* Effect.all([
    installInto(app, [tarball, pinned("effect"), ...peers, pinned("@types/node")], env),
    installInto(otherApp, [tarball, `effect@${otherEffect}`, ...peers, pinned("@types/node")], env)
  ], { concurrency: 2, discard: true })
  return { dir, app, otherApp, env } satisfies Installed
})

const minutes = (n: number) => n * 60_000

/** Writes `source` as `name` in `dir` and runs it with plain node. */
const runScript = (installed: Installed, dir: string, name: string, source: string, args: ReadonlyArray<string> = []) =>
  Effect.gen(function*() {
    Fs.writeFileSync(Path.join(dir, name), source)
    return yield* exec(process.execPath, [name, ...args], { cwd: dir, env: installed.env })
  })

const tsc = Path.join(projectRoot, "node_modules", "typescript", "bin", "tsc")

/** A consumer program: embedded and remote, the Provider's type intact (one copy of effect's types). */
const consumerProgram = `
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import { Client, type GenerateChunk, Provider, Runtime } from "nativegen"

const program = Effect.gen(function*() {
  const provider = yield* Provider
  const chunks = yield* provider.generate({ messages: [{ role: "user", content: "hello" }], maxTokens: 8 }).pipe(Stream.runCollect)
  return Chunk.toReadonlyArray(chunks)
})

export const embedded: Effect.Effect<ReadonlyArray<GenerateChunk>, unknown> =
  program.pipe(Effect.provide(Runtime.layer({ store: { root: "/tmp/store" } })))
export const remote: Effect.Effect<ReadonlyArray<GenerateChunk>, unknown> =
  program.pipe(Effect.provide(Client.layer({ socketPath: "/tmp/nativegen.sock" })))
export const text = (chunks: ReadonlyArray<GenerateChunk>): string =>
  chunks.map((chunk) => (chunk._tag === "Text" ? chunk.text : "")).join("")
`

/** Type-checks the consumer program; `libCheck` also checks every declaration file (ours under the consumer's flags). */
const typeCheck = (installed: Installed, dir: string, file: string, flags: ReadonlyArray<string>, libCheck: boolean) =>
  Effect.gen(function*() {
    Fs.writeFileSync(Path.join(dir, file), consumerProgram)
    return yield* exec(process.execPath, [
      tsc,
      "--noEmit",
      "--strict",
      "--noPropertyAccessFromIndexSignature",
      "--exactOptionalPropertyTypes",
      "--target",
      "es2022",
      "--types",
      "node",
      ...(libCheck ? [] : ["--skipLibCheck"]),
      ...flags,
      file
    ], { cwd: dir, env: installed.env })
  })

describe("the npm package", { timeout: minutes(4) }, () => {
  layer(Layer.scoped(Package, install), { timeout: minutes(8) })((it) => {
    it.effect("installs without dev dependencies: no tsx, no TypeScript sources, one nativegen with the seed", () =>
      Effect.gen(function*() {
        const { app } = yield* Package
        const modules = Path.join(app, "node_modules")
        assert.isFalse(Fs.existsSync(Path.join(modules, "tsx")), "tsx is installed")
        assert.isFalse(Fs.existsSync(Path.join(modules, "vitest")), "vitest is installed")
        const installed = Path.join(modules, "nativegen")
        assert.isFalse(Fs.existsSync(Path.join(installed, "src")), "the sources are shipped")
        assert.isFalse(Fs.existsSync(Path.join(installed, "test")), "the tests are shipped")
        const shipped = Fs.readdirSync(installed, { recursive: true }).map(String)
        assert.deepStrictEqual(shipped.filter((f) => f.endsWith(".ts") && !f.endsWith(".d.ts")), [])
        assert.isTrue(Fs.existsSync(Path.join(installed, "fixtures", "seed", "seed.pub")))
        assert.isTrue(Fs.existsSync(Path.join(installed, "dist", "src", "native", "child.js")))
      }))

    it.effect("(a) import(\"nativegen\") with plain node runs an embedded generation on the packaged seed", () =>
      Effect.gen(function*() {
        const installed = yield* Package
        const result = yield* runScript(installed, installed.app, "embed.mjs", `
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Stream from "effect/Stream"
import { Provider, Runtime } from "nativegen"

const program = Effect.gen(function*() {
  const provider = yield* Provider
  const chunks = yield* provider.generate({ messages: [{ role: "user", content: "hello" }], maxTokens: 8 }).pipe(Stream.runCollect)
  return Chunk.toReadonlyArray(chunks)
})
const runtime = Runtime.layer({
  store: { root: process.argv[2] },
  admission: { contextCap: { generation: 1024, decision: 512 } },
  worker: { child: { backend: "cpu", threads: 1, batchSize: 512 } }
})
const chunks = await program.pipe(Effect.provide(runtime), Logger.withMinimumLogLevel(LogLevel.Warning), Effect.runPromise)
console.log(JSON.stringify(chunks))
`, [Path.join(installed.dir, "store")]).pipe(Effect.flatMap(succeeded("the embedded generation")))
        const chunks = JSON.parse(result.stdout.trim().split("\n").at(-1)!) as ReadonlyArray<{ readonly _tag: string; readonly stopReason?: string }>
        assert.isTrue(chunks.some((c) => c._tag === "Text"), result.stdout)
        const done = chunks.at(-1)
        assert.strictEqual(done?._tag, "Done", result.stdout)
        // The seed imported into the given store, models generated there: nothing in the cache or the package.
        assert.isTrue(Fs.existsSync(Path.join(installed.dir, "store", "journal.jsonl")))
        assert.isFalse(Fs.existsSync(Path.join(installed.app, "node_modules", "nativegen", ".cache")))
      }), { timeout: minutes(5) })

    it.scoped("(b) npx nativegen --version prints package.json's version; serve + status round trip on a temporary socket and store", () =>
      Effect.gen(function*() {
        const installed = yield* Package
        const version = yield* exec("npx", ["--no", "--", "nativegen", "--version"], { cwd: installed.app, env: installed.env })
          .pipe(Effect.flatMap(succeeded("nativegen --version")))
        assert.strictEqual(version.stdout.trim(), ours.version)
        // The engine build applies the patches the package ships (dry run: the steps, nothing built).
        const engineBuild = yield* exec("npx", ["--no", "--", "nativegen", "engine", "build", "--gpu", "cuda", "--dry-run"], {
          cwd: installed.app,
          env: installed.env
        }).pipe(Effect.flatMap(succeeded("nativegen engine build --dry-run")))
        assert.include(engineBuild.stdout, "apply nativegen's patch cuda-graphs-single-token")
        assert.isTrue(Fs.existsSync(Path.join(installed.app, "node_modules", "nativegen", "patches", "llama.cpp", "cuda-graphs-single-token.diff")))

        const socket = Path.join(installed.dir, "run", "s.sock")
        const env = { ...installed.env, NATIVEGEN_SOCKET: socket, NATIVEGEN_STORE_ROOT: Path.join(installed.dir, "serve-store") }
        const ready = yield* Deferred.make<void, string>()
        let output = ""
        yield* Effect.acquireRelease(
          Effect.sync(() => {
            const child = ChildProcess.spawn(Path.join(installed.app, "node_modules", ".bin", "nativegen"), ["serve"], {
              cwd: installed.app,
              env,
              stdio: ["ignore", "pipe", "pipe"]
            })
            const collect = (s: string) => {
              output += s
              if (/ready \(engine 1, pid \d+, cpu\)/.test(output)) Deferred.unsafeDone(ready, Effect.void)
            }
            child.stdout.setEncoding("utf8").on("data", collect)
            child.stderr.setEncoding("utf8").on("data", collect)
            child.on("close", (code) => Deferred.unsafeDone(ready, Effect.fail(`serve exited with ${code}:\n${output}`)))
            return child
          }),
          // Ctrl-C, as a user stops it; SIGKILL if it has not stopped in 20 seconds.
          (child) => {
            const closed = Effect.async<void>((resume) => {
              if (child.exitCode !== null || child.signalCode !== null) return resume(Effect.void)
              child.once("close", () => resume(Effect.void))
            })
            return Effect.sync(() => child.kill("SIGINT")).pipe(
              Effect.zipRight(closed.pipe(Effect.timeoutOption("20 seconds"))),
              Effect.zipRight(Effect.sync(() => child.kill("SIGKILL"))),
              Effect.zipRight(closed)
            )
          }
        )
        yield* Deferred.await(ready).pipe(Effect.orDieWith((why) => new Error(why)))
        const status = yield* exec("npx", ["--no", "--", "nativegen", "status"], { cwd: installed.app, env })
          .pipe(Effect.flatMap(succeeded("nativegen status")))
        assert.match(status.stdout, /^state {6}ready$/m)
        assert.match(status.stdout, /^generation {2}qwen-chat\s+1\s+1024\s/m)
      }), { timeout: minutes(5) })

    it.effect("(c) a strict consumer type-checks under moduleResolution node16, bundler and node10", () =>
      Effect.gen(function*() {
        const installed = yield* Package
        // Our declarations are checked under the strict flags once (node16); the other two are about resolution.
        const settings: ReadonlyArray<readonly [string, ReadonlyArray<string>, boolean]> = [
          ["node16.ts", ["--module", "node16", "--moduleResolution", "node16"], true],
          ["bundler.ts", ["--module", "esnext", "--moduleResolution", "bundler"], false],
          ["node10.ts", ["--module", "esnext", "--moduleResolution", "node10"], false]
        ]
        for (const [file, flags, libCheck] of settings) {
          const result = yield* typeCheck(installed, installed.app, file, flags, libCheck)
          assert.strictEqual(result.code, 0, `${flags.join(" ")}:\n${result.stdout}${result.stderr}`)
        }
      }))

    it.effect("(d) a consumer on another effect 3.x patch resolves one copy of effect, and its types hold", () =>
      Effect.gen(function*() {
        const installed = yield* Package
        const listed = yield* exec("npm", ["ls", "effect", "--all", "--parseable", "--long"], { cwd: installed.otherApp, env: installed.env })
          .pipe(Effect.flatMap(succeeded("npm ls effect")))
        const copies = [...new Set(listed.stdout.trim().split("\n").filter((line) => /[/\\]node_modules[/\\]effect:/.test(line)))]
        assert.deepStrictEqual(copies.map((line) => line.split(":")[1]), [`effect@${otherEffect}`], listed.stdout)
        const identity = yield* runScript(installed, installed.otherApp, "identity.mjs", `
import { createRequire } from "node:module"
import { fileURLToPath } from "node:url"
const ours = fileURLToPath(import.meta.resolve("effect"))
const theirs = createRequire(fileURLToPath(import.meta.resolve("nativegen"))).resolve("effect/package.json")
console.log(JSON.stringify({ ours, theirs }))
`).pipe(Effect.flatMap(succeeded("the identity check")))
        const { ours: consumerEffect, theirs } = JSON.parse(identity.stdout) as { ours: string; theirs: string }
        assert.isTrue(consumerEffect.startsWith(Path.dirname(theirs) + Path.sep), `${consumerEffect} is not under ${Path.dirname(theirs)}`)
        const checked = yield* typeCheck(installed, installed.otherApp, "node16.ts", ["--module", "node16", "--moduleResolution", "node16"], false)
        assert.strictEqual(checked.code, 0, checked.stdout + checked.stderr)
      }))
  })
})
