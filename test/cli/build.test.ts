/**
 * The repository's command line and engine children run compiled code that is always the sources
 * as they are now (bin/sources-build.js): in a copy of the project, a source edited after a build
 * is what the next command and the next engine child run, and sources back as they were reuse
 * their earlier build. Also: a command line loads only the subcommand module it names
 * (src/cli/main.ts), observed through module resolution hooks.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as ChildProcess from "node:child_process"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { pathToFileURL } from "node:url"
import { currentBuild } from "../../bin/sources-build.js"
import { projectRoot } from "../../fixtures/models.js"
import { environment, type Result } from "./support.js"

/** The parts of the project a build reads, copied (node_modules linked) into a temporary directory removed with the scope. */
const projectCopy = Effect.acquireRelease(
  Effect.sync(() => {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "ng-build-"))
    for (const part of ["src", "fixtures", "bin", "package.json", "tsconfig.json"]) {
      Fs.cpSync(Path.join(projectRoot, part), Path.join(dir, part), { recursive: true })
    }
    Fs.symlinkSync(Path.join(projectRoot, "node_modules"), Path.join(dir, "node_modules"))
    return dir
  }),
  (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
)

const builds = (project: string) => Fs.readdirSync(Path.join(project, ".cache", "build")).filter((entry) => !entry.startsWith("."))

/** Runs `node <args>` in `project` to completion. */
const node = (project: string, args: ReadonlyArray<string>) =>
  Effect.async<Result>((resume) => {
    const child = ChildProcess.spawn(process.execPath, args, { cwd: project, env: environment({ NO_COLOR: "1" }), stdio: ["ignore", "pipe", "pipe"] })
    let stdout = ""
    let stderr = ""
    child.stdout.setEncoding("utf8").on("data", (s: string) => (stdout += s))
    child.stderr.setEncoding("utf8").on("data", (s: string) => (stderr += s))
    child.on("close", (code, signal) => resume(Effect.succeed({ code, signal, stdout, stderr })))
    return Effect.sync(() => void child.kill("SIGKILL"))
  })

/**
 * Starts `bin/engine-child.js` of `project` (protocol channel on fd 3, as the host spawns it) and
 * returns its stderr once it contains `text`; the child and its group are killed before this returns.
 */
const engineChildPrints = (project: string, text: string) =>
  Effect.async<string>((resume) => {
    const child = ChildProcess.spawn(process.execPath, [Path.join(project, "bin", "engine-child.js")], {
      cwd: project,
      env: environment({ UV_THREADPOOL_SIZE: "1" }),
      stdio: ["ignore", "ignore", "pipe", "pipe"],
      detached: true
    })
    const kill = () => {
      try {
        process.kill(-child.pid!, "SIGKILL")
      } catch {
        // Gone already.
      }
    }
    let stderr = ""
    child.stderr!.setEncoding("utf8").on("data", (s: string) => {
      stderr += s
      if (stderr.includes(text)) kill()
    })
    child.on("close", () => resume(Effect.succeed(stderr)))
    return Effect.sync(kill)
  })

const edit = (file: string, change: (text: string) => string) => Fs.writeFileSync(file, change(Fs.readFileSync(file, "utf8")))

describe("the build of the sources", () => {
  it.scoped(
    "a source changed after a build is what the next command and engine child run; the sources as they were reuse their build",
    () =>
      Effect.gen(function*() {
        const project = yield* projectCopy
        const main = Path.join(project, "src", "cli", "main.ts")
        const child = Path.join(project, "src", "native", "child.ts")
        const original = { main: Fs.readFileSync(main, "utf8"), child: Fs.readFileSync(child, "utf8") }
        const help = ["bin/nativegen.js", "--help"]

        const before = yield* node(project, help)
        assert.strictEqual(before.code, 0, before.stderr)
        assert.include(before.stdout, "On-device LLM inference runtime")
        assert.strictEqual(builds(project).length, 1)

        const marker = `edited-${Crypto.randomUUID()}`
        edit(main, (text) => text.replace("On-device LLM inference runtime: ", `${marker}: `))
        edit(child, (text) => `${text}\nprocess.stderr.write(${JSON.stringify(`${marker}\n`)})\n`)
        const after = yield* node(project, help)
        assert.strictEqual(after.code, 0, after.stderr)
        assert.include(after.stdout, marker)
        assert.notInclude(after.stdout, "On-device LLM inference runtime")
        assert.include(yield* engineChildPrints(project, marker), marker)
        assert.strictEqual(builds(project).length, 2)

        Fs.writeFileSync(main, original.main)
        Fs.writeFileSync(child, original.child)
        const restored = yield* node(project, help)
        assert.include(restored.stdout, "On-device LLM inference runtime")
        assert.notInclude(restored.stdout, marker)
        assert.strictEqual(builds(project).length, 2)
      }),
    120_000
  )

  it.scoped("a file the build reads from outside src/ and fixtures/ fails the build instead of being left out of its key", () =>
    Effect.gen(function*() {
      const project = yield* projectCopy
      Fs.mkdirSync(Path.join(project, "elsewhere"))
      Fs.writeFileSync(Path.join(project, "elsewhere", "value.ts"), "export const value = 1\n")
      edit(Path.join(project, "src", "cli", "main.ts"), (text) => `import "../../elsewhere/value.js"\n${text}`)
      const result = yield* node(project, ["bin/nativegen.js", "--version"])
      assert.notStrictEqual(result.code, 0)
      assert.include(result.stderr, "outside src/ and fixtures/ that its key does not cover")
      assert.include(result.stderr, Path.join(project, "elsewhere", "value.ts"))
      assert.isFalse(Fs.existsSync(Path.join(project, ".cache", "build")) && builds(project).length > 0)
    }), 120_000)
})

/** The modules of the build that `nativegen ...args` loads (logged by a module resolution hook), by name without their chunk hash. */
const modulesLoadedBy = (args: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const dir = yield* Effect.acquireRelease(
      Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "ng-hooks-"))),
      (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
    )
    const log = Path.join(dir, "resolved.log")
    const hooks = Path.join(dir, "hooks.mjs")
    Fs.writeFileSync(
      hooks,
      `import { appendFileSync } from "node:fs"\nexport const resolve = async (specifier, context, next) => {\n  const resolved = await next(specifier, context)\n  appendFileSync(${JSON.stringify(log)}, resolved.url + "\\n")\n  return resolved\n}\n`
    )
    const register = Path.join(dir, "register.mjs")
    Fs.writeFileSync(register, `import { register } from "node:module"\nregister(${JSON.stringify(pathToFileURL(hooks).href)})\n`)
    const build = yield* Effect.promise(() => currentBuild())
    const result = yield* node(projectRoot, ["--import", pathToFileURL(register).href, Path.join(projectRoot, "bin", "nativegen.js"), ...args])
    assert.strictEqual(result.code, 0, result.stderr)
    return Fs.readFileSync(log, "utf8").split("\n")
      .filter((url) => url.startsWith(pathToFileURL(build).href))
      .map((url) => Path.basename(url).replace(/-[A-Z0-9]{8}\.js$/, ""))
  })

describe("lazy subcommands", () => {
  const subcommandModules = ["Serve", "Chat", "Decide", "Status", "Show", "Ps", "StoreCommands", "Keys"]

  it.scoped("a lone --version loads no subcommand module; `chat --help` loads Chat's alone; --help loads them all", () =>
    Effect.gen(function*() {
      const version = yield* modulesLoadedBy(["--version"])
      assert.include(version, "main.js")
      assert.deepStrictEqual(subcommandModules.filter((name) => version.includes(name)), [])
      const chat = yield* modulesLoadedBy(["chat", "--help"])
      assert.deepStrictEqual(subcommandModules.filter((name) => chat.includes(name)), ["Chat"])
      const help = yield* modulesLoadedBy(["--help"])
      assert.deepStrictEqual(subcommandModules.filter((name) => help.includes(name)), subcommandModules)
    }), 120_000)
})
