/**
 * Running `nativegen` as a user would: `node bin/nativegen.js ...` in its own process, with a
 * private XDG environment, capturing stdout, stderr and the exit code.
 */
import * as Effect from "effect/Effect"
import * as Scope from "effect/Scope"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { projectRoot } from "../../fixtures/models.js"

export const bin = Path.join(projectRoot, "bin", "nativegen.js")

export interface Result {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
  readonly stdout: string
  readonly stderr: string
}

/** A private home: XDG_DATA_HOME and XDG_RUNTIME_DIR under one temporary directory, removed with the scope. */
export interface Home {
  readonly dir: string
  readonly env: Record<string, string>
}

export const makeHome: Effect.Effect<Home, never, Scope.Scope> = Effect.acquireRelease(
  Effect.sync(() => {
    // Short: the socket path must stay under 107 bytes.
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "ng-"))
    const data = Path.join(dir, "data")
    const runtime = Path.join(dir, "run")
    Fs.mkdirSync(runtime, { mode: 0o700 })
    return {
      dir,
      env: {
        XDG_DATA_HOME: data,
        XDG_CONFIG_HOME: Path.join(dir, "config"),
        XDG_RUNTIME_DIR: runtime,
        HOME: dir,
        NO_COLOR: "1"
      }
    }
  }),
  (home) => Effect.sync(() => Fs.rmSync(home.dir, { recursive: true, force: true }))
)

/** The environment a spawned command gets: ours without NATIVEGEN_* overrides of the outer shell, plus `env`. */
export const environment = (env: Record<string, string>): NodeJS.ProcessEnv => {
  const base: NodeJS.ProcessEnv = {}
  for (const [key, value] of Object.entries(process.env)) {
    if ((!key.startsWith("NATIVEGEN_") || key === "NATIVEGEN_TEST_RUN") && !key.startsWith("XDG_")) base[key] = value
  }
  return { ...base, ...env }
}

/** Runs `nativegen ...args` to completion (killed if the fiber is interrupted). */
export const run = (
  args: ReadonlyArray<string>,
  options: { readonly env?: Record<string, string>; readonly stdin?: string; readonly cwd?: string } = {}
): Effect.Effect<Result> =>
  Effect.async<Result>((resume) => {
    const child = ChildProcess.spawn(process.execPath, [bin, ...args], {
      cwd: options.cwd ?? projectRoot,
      env: environment(options.env ?? {}),
      stdio: ["pipe", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    child.stdout.setEncoding("utf8").on("data", (s: string) => (stdout += s))
    child.stderr.setEncoding("utf8").on("data", (s: string) => (stderr += s))
    child.on("close", (code, signal) => resume(Effect.succeed({ code, signal, stdout, stderr })))
    child.stdin.on("error", () => {})
    child.stdin.end(options.stdin ?? "")
    return Effect.sync(() => void child.kill("SIGKILL"))
  })

/** Starts `nativegen ...args`, sends SIGINT once stdout satisfies `until`, and waits for the exit. */
export const runUntil = (
  args: ReadonlyArray<string>,
  until: (stdout: string) => boolean,
  options: { readonly env?: Record<string, string> } = {}
): Effect.Effect<Result> =>
  Effect.async<Result>((resume) => {
    const child = ChildProcess.spawn(process.execPath, [bin, ...args], {
      cwd: projectRoot,
      env: environment(options.env ?? {}),
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    let signalled = false
    child.stdout.setEncoding("utf8").on("data", (s: string) => {
      stdout += s
      if (!signalled && until(stdout)) {
        signalled = true
        child.kill("SIGINT")
      }
    })
    child.stderr.setEncoding("utf8").on("data", (s: string) => (stderr += s))
    child.on("close", (code, signal) => resume(Effect.succeed({ code, signal, stdout, stderr })))
    return Effect.sync(() => void child.kill("SIGKILL"))
  })

/** Why commands cannot run in a pseudo-terminal here (util-linux `script` is missing), or undefined. */
export const terminalUnavailable = ((): string | undefined => {
  const probe = ChildProcess.spawnSync("script", ["-qec", "true", "/dev/null"], { encoding: "utf8" })
  if (probe.error !== undefined) return `util-linux script is not available (${probe.error.message})`
  return probe.status === 0 ? undefined : `script failed: ${probe.stderr.trim()}`
})()

const shellQuote = (arg: string) => `'${arg.replaceAll("'", `'\\''`)}'`

/**
 * Runs `nativegen ...args` on a pseudo-terminal (through util-linux `script`), colour allowed, as
 * a user at a terminal would: stdout and stderr both arrive in `stdout`, with the terminal's CRLF
 * line ends turned back into LF.
 */
export const runInTerminal = (
  args: ReadonlyArray<string>,
  options: { readonly env?: Record<string, string> } = {}
): Effect.Effect<Result> =>
  Effect.async<Result>((resume) => {
    const env: NodeJS.ProcessEnv = { ...environment(options.env ?? {}), TERM: "xterm" }
    delete env.NO_COLOR
    const command = [process.execPath, bin, ...args].map(shellQuote).join(" ")
    const child = ChildProcess.spawn("script", ["-qec", command, "/dev/null"], {
      cwd: projectRoot,
      env,
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    child.stdout.setEncoding("utf8").on("data", (s: string) => (stdout += s))
    child.stderr.setEncoding("utf8").on("data", (s: string) => (stderr += s))
    child.on("close", (code, signal) => resume(Effect.succeed({ code, signal, stdout: stdout.replaceAll("\r\n", "\n"), stderr })))
    return Effect.sync(() => void child.kill("SIGKILL"))
  })
