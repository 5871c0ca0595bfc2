/**
 * Host side of one engine child: spawns it in its own process group with the protocol socket on
 * fd 3, offers a typed RPC client over that socket, and owns its end of life. The exit is observed
 * through the process (never guessed); closing the scope asks the child to shut down, then sends
 * SIGTERM and SIGKILL to the group after deadlines, and completes only once the exit is observed.
 * Host code: it spawns the engine but never loads native inference code.
 */
import * as NodeSocket from "@effect/platform-node/NodeSocket"
import * as Socket from "@effect/platform/Socket"
import * as RpcClient from "@effect/rpc/RpcClient"
import type { RpcClientError } from "@effect/rpc/RpcClientError"
import * as RpcSerialization from "@effect/rpc/RpcSerialization"
import * as Data from "effect/Data"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Scope from "effect/Scope"
import * as ChildProcess from "node:child_process"
import type { Duplex } from "node:stream"
import { fileURLToPath } from "node:url"
import { childEnvironment } from "./ChildEnvironment.js"
import type { ChildSettings } from "./ChildSettings.js"
import { engineSerialization } from "./Framing.js"
import { EngineRpcs } from "./Protocol.js"

/** How a child process ended, as the operating system reported it. */
export class ChildExit extends Data.Class<{ readonly code: number | null; readonly signal: string | null }> {
  get description() {
    return this.signal !== null ? `killed by ${this.signal}` : `exited with code ${this.code}`
  }
}

export class SpawnFailed extends Data.TaggedError("SpawnFailed")<{ readonly command: string; readonly reason: string }> {
  override get message() {
    return `cannot start engine child ${this.command}: ${this.reason}`
  }
}

export type EngineClient = RpcClient.FromGroup<typeof EngineRpcs, RpcClientError>

export interface EngineChild {
  readonly pid: number
  readonly client: EngineClient
  /** Completes when the process has exited, with how it ended. */
  readonly exited: Effect.Effect<ChildExit>
  /** For a broken child: SIGTERM, SIGKILL after the stop deadline, and its exit observed. */
  readonly terminate: Effect.Effect<ChildExit>
}

export interface SpawnOptions {
  readonly settings: ChildSettings
  /**
   * Variables set in the child on top of what it inherits from the host (see ChildEnvironment.ts:
   * only an allowlist is inherited). They cannot override the settings.
   */
  readonly env?: Readonly<Record<string, string>> | undefined
  /** The child's incarnation number (NATIVEGEN_INCARNATION), for incarnation-bound failpoints. Default 1. */
  readonly incarnation?: number | undefined
  /** The Node executable; overridable to test spawn failures. */
  readonly execPath?: string | undefined
  /** Time allowed for a graceful shutdown request, then for SIGTERM, before SIGKILL. */
  readonly stopTimeout?: Duration.DurationInput | undefined
}

/**
 * How the child is started: compiled (this module runs from `dist/`, or from the repository's
 * build under `.cache/build/`: its URL ends in `.js`), the `child.js` beside it with plain `node`;
 * from the sources (a host under vitest or tsx), `bin/engine-child.js`, which runs the build of the
 * sources as they are now (bin/sources-build.js), never TypeScript through a loader.
 */
const childArguments: ReadonlyArray<string> = [
  fileURLToPath(new URL(import.meta.url.endsWith(".js") ? "./child.js" : "../../bin/engine-child.js", import.meta.url))
]

const signalGroup = (pid: number, signal: NodeJS.Signals) => {
  try {
    process.kill(-pid, signal)
  } catch {
    // The group is already gone.
  }
}

/** Spawns an engine child; the returned value lives as long as the scope. */
export const spawn = (options: SpawnOptions): Effect.Effect<EngineChild, SpawnFailed, Scope.Scope> =>
  Effect.gen(function*() {
    const command = options.execPath ?? process.execPath
    const stopTimeout = options.stopTimeout ?? Duration.seconds(5)
    const exit = yield* Deferred.make<ChildExit>()
    /** SIGTERM to the group, SIGKILL after the deadline, and the exit observed. Idempotent. */
    const terminate = (pid: number) =>
      Effect.gen(function*() {
        if (yield* Deferred.isDone(exit)) {
          signalGroup(pid, "SIGKILL")
          return yield* Deferred.await(exit)
        }
        signalGroup(pid, "SIGTERM")
        const stopped = yield* Deferred.await(exit).pipe(Effect.timeoutOption(stopTimeout))
        if (Option.isNone(stopped)) {
          yield* Effect.logWarning(`engine child ${pid} ignored SIGTERM for ${Duration.format(stopTimeout)}; killing it`)
        }
        // Whatever the child left in its group goes too.
        signalGroup(pid, "SIGKILL")
        return yield* Deferred.await(exit)
      })
    const proc = yield* Effect.acquireRelease(
      Effect.async<ChildProcess.ChildProcess, SpawnFailed>((resume) => {
        const child = ChildProcess.spawn(command, childArguments, {
          detached: true,
          stdio: ["ignore", "inherit", "inherit", "pipe"],
          env: childEnvironment(process.env, options.settings, options.env, {
            NATIVEGEN_INCARNATION: String(options.incarnation ?? 1)
          })
        })
        child.once("exit", (code, signal) => Deferred.unsafeDone(exit, Exit.succeed(new ChildExit({ code, signal }))))
        child.once("error", (cause) => {
          if (child.pid === undefined) resume(Effect.fail(new SpawnFailed({ command, reason: cause.message })))
        })
        child.once("spawn", () => resume(Effect.succeed(child)))
      }),
      (child) => terminate(child.pid!)
    )
    const pid = proc.pid!
    const channel = proc.stdio[3] as Duplex
    const socket = yield* NodeSocket.fromDuplex(Effect.succeed(channel))
    // Built in this scope (not through Effect.provide of a layer, whose scope would end at once).
    const protocol = yield* RpcClient.makeProtocolSocket({ retryTransientErrors: false }).pipe(
      Effect.provideService(Socket.Socket, socket),
      Effect.provideService(RpcSerialization.RpcSerialization, engineSerialization)
    )
    const client = yield* RpcClient.make(EngineRpcs).pipe(Effect.provideService(RpcClient.Protocol, protocol))
    // Runs before the process finalizer: a graceful request first, while the client is alive.
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        if (yield* Deferred.isDone(exit)) return
        yield* client.Shutdown().pipe(Effect.ignore, Effect.timeoutOption(stopTimeout))
        yield* Deferred.await(exit).pipe(Effect.timeoutOption(stopTimeout))
      })
    )
    return {
      pid,
      client,
      exited: Deferred.await(exit),
      terminate: terminate(pid)
    }
  })
