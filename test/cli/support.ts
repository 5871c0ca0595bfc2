/**
 * Running `nativegen` as a user would: `node bin/nativegen.js ...` in its own process, with a
 * private XDG environment, capturing stdout, stderr and the exit code; a server of one's own
 * (`startServer`); and a real terminal (tmux) to type into and read (`openPane`).
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import * as ChildProcess from "node:child_process"
import * as Crypto from "node:crypto"
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

// ---------------------------------------------------------------------------------------------
// A server of our own, and a terminal driven as a person would (tmux)
// ---------------------------------------------------------------------------------------------

/** Small contexts and one thread: the machine has two cores and other suites run at once. */
export const smallServerEnv = {
  NATIVEGEN_THREADS: "1",
  NATIVEGEN_ADMISSION_GENERATION_CONTEXT_CAP: "1024",
  NATIVEGEN_ADMISSION_DECISION_CONTEXT_CAP: "512"
}

export interface Server {
  /** The server process (the leader of its process group). */
  readonly pid: number
  readonly socket: string
  readonly log: () => string
  readonly enginePid: number
}

/**
 * `nativegen serve` in `home`, in its own process group, until the scope closes (SIGINT, then
 * SIGKILL to the group if it lingers). Ready when it logs `ready (engine 1, ...)` (a bounded poll).
 */
export const startServer = (
  home: Home,
  env: Record<string, string> = smallServerEnv,
  readyWithin: Duration.DurationInput = "120 seconds"
): Effect.Effect<Server, never, Scope.Scope> =>
  Effect.gen(function*() {
    let output = ""
    let exited = false
    const child = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const child = ChildProcess.spawn(process.execPath, [bin, "serve"], {
          cwd: projectRoot,
          env: environment({ ...home.env, ...env }),
          stdio: ["ignore", "pipe", "pipe"],
          detached: true
        })
        child.stdout.setEncoding("utf8").on("data", (s: string) => (output += s))
        child.stderr.setEncoding("utf8").on("data", (s: string) => (output += s))
        child.on("close", () => (exited = true))
        return child
      }),
      (child) =>
        Effect.gen(function*() {
          const signal = (name: NodeJS.Signals) =>
            Effect.sync(() => {
              try {
                process.kill(-child.pid!, name)
              } catch {}
            })
          yield* signal("SIGINT")
          yield* Effect.suspend(() => (exited ? Effect.void : Effect.fail("running"))).pipe(
            Effect.retry(Schedule.spaced("100 millis").pipe(Schedule.upTo("20 seconds"))),
            Effect.orElse(() => signal("SIGKILL"))
          )
        })
    )
    const ready = /ready \(engine 1, pid (\d+), (?:cpu|cuda|vulkan|metal)\)/
    const match = yield* Effect.suspend(() => {
      const m = ready.exec(output)
      if (m !== null) return Effect.succeed(m)
      return exited ? Effect.die(new Error(`the server (pid ${child.pid}) exited:\n${output}`)) : Effect.fail("not yet")
    }).pipe(
      Effect.retry(Schedule.spaced("100 millis").pipe(Schedule.upTo(readyWithin))),
      Effect.catchAll(() => Effect.die(new Error(`the server (pid ${child.pid}) was not ready within ${Duration.format(readyWithin)}:\n${output}`)))
    )
    return {
      pid: child.pid!,
      socket: Path.join(home.env.XDG_RUNTIME_DIR!, "nativegen", "nativegen.sock"),
      log: () => output,
      enginePid: Number(match[1])
    }
  })

/** Why tmux cannot be used here, or undefined. */
export const tmuxUnavailable = ((): string | undefined => {
  const probe = ChildProcess.spawnSync("tmux", ["-V"], { encoding: "utf8" })
  return probe.error !== undefined ? `tmux is not available (${probe.error.message})` : undefined
})()

/** A terminal (100 x 30 unless asked) in a private tmux server, running one command. */
export interface Pane {
  /** `tmux send-keys` (key names such as `Enter`, `C-c`, `Up`; `literal` text is sent as typed). */
  readonly keys: (...keys: ReadonlyArray<string>) => Effect.Effect<void>
  readonly type: (text: string) => Effect.Effect<void>
  /** Everything the pane showed, scrollback included, wrapped lines joined. */
  readonly text: Effect.Effect<string>
  /** Polls the pane (every 50 ms, at most `within`) until `until` holds; dies with the pane's text otherwise. */
  readonly waitFor: (what: string, until: (text: string) => boolean, within?: Duration.DurationInput) => Effect.Effect<string>
}

const tmuxSync = (socket: string, args: ReadonlyArray<string>, env?: NodeJS.ProcessEnv) => {
  const result = ChildProcess.spawnSync("tmux", ["-L", socket, ...args], { encoding: "utf8", ...(env === undefined ? {} : { env }) })
  if (result.status !== 0) throw new Error(`tmux ${args.join(" ")}: ${result.stderr}`)
  return result.stdout
}

/**
 * Starts `command` (a shell command line) in a new tmux session on a private server socket, with
 * `env` (TERM=xterm, colour allowed); the server is killed with the scope.
 */
export const openPane = (
  command: string,
  env: Record<string, string>,
  size: { readonly columns: number; readonly rows: number } = { columns: 100, rows: 30 }
): Effect.Effect<Pane, never, Scope.Scope> =>
  Effect.gen(function*() {
    const socket = `nativegen-test-${process.pid}-${Crypto.randomBytes(4).toString("hex")}`
    const paneEnv: NodeJS.ProcessEnv = { ...environment(env), TERM: "xterm" }
    delete paneEnv.NO_COLOR
    delete paneEnv.TMUX
    yield* Effect.acquireRelease(
      Effect.sync(() => tmuxSync(socket, ["new-session", "-d", "-x", String(size.columns), "-y", String(size.rows), "-s", "chat", command], paneEnv)),
      () => Effect.sync(() => void ChildProcess.spawnSync("tmux", ["-L", socket, "kill-server"]))
    )
    yield* Effect.sync(() => tmuxSync(socket, ["set-option", "-t", "chat", "history-limit", "10000"]))
    const text = Effect.sync(() => tmuxSync(socket, ["capture-pane", "-p", "-J", "-S", "-", "-t", "chat"]))
    const keys = (...keys: ReadonlyArray<string>) => Effect.sync(() => void tmuxSync(socket, ["send-keys", "-t", "chat", ...keys]))
    const type = (literal: string) => Effect.sync(() => void tmuxSync(socket, ["send-keys", "-t", "chat", "-l", literal]))
    const waitFor = (what: string, until: (text: string) => boolean, within: Duration.DurationInput = "60 seconds") =>
      Effect.flatMap(text, (shown) => (until(shown) ? Effect.succeed(shown) : Effect.fail(shown))).pipe(
        Effect.retry(Schedule.spaced("50 millis").pipe(Schedule.upTo(within))),
        Effect.catchAll((shown) => Effect.die(new Error(`the pane never showed ${what}:\n${shown}`)))
      )
    return { keys, type, text, waitFor }
  })
