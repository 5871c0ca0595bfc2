/**
 * Runner processes for the membership and routing tests: `nativegen serve --cluster` on a Unix
 * socket in its own home (qwen-chat, one thread, small contexts), with a typed client on its
 * public socket, that a test can signal (SIGTERM: a graceful drain) before its scope ends. The
 * scope stops whatever is still running (SIGINT, SIGKILL after 20 s).
 */
import { Sharding } from "@effect/cluster/Sharding"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import * as ChildProcess from "node:child_process"
import * as Path from "node:path"
import { projectRoot } from "../../fixtures/models.js"
import * as Placement from "../../src/cluster/Placement.js"
import * as Runner from "../../src/cluster/Runner.js"
import * as Status from "../../src/cluster/Status.js"
import * as WorkEntity from "../../src/cluster/WorkEntity.js"
import type * as Storage from "../../src/cluster/Storage.js"
import * as Client from "../../src/rpc/Client.js"
import { Provider } from "../../src/services/Provider.js"
import { bin, environment, makeHome, smallServerEnv } from "../cli/support.js"
import { shardLocks } from "./settle.js"

export interface RunnerProcess {
  readonly name: string
  /** Its address as the runner storage records it (`PATH:0`). */
  readonly stored: string
  readonly pid: number
  readonly provider: Provider["Type"]
  readonly log: () => string
  /**
   * Sends a signal to the runner's main process only, as a service manager stopping it would (its
   * engine children, in its process group, are the runner's to stop).
   */
  readonly signal: (name: NodeJS.Signals) => Effect.Effect<void>
  /** Waits for the process to exit; its exit code and signal. */
  readonly exited: Effect.Effect<{ readonly code: number | null; readonly signal: NodeJS.Signals | null }>
}

/** Starts runner `name` with its cluster socket in `dir`, sharing `storage`; `env` adds settings. */
export const startRunner = (
  dir: string,
  name: string,
  env: Record<string, string>
): Effect.Effect<RunnerProcess, never, Scope.Scope> =>
  Effect.gen(function*() {
    const home = yield* makeHome
    const address = Path.join(dir, `${name}.sock`)
    let output = ""
    let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined
    const waiters: Array<() => void> = []
    const child = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const child = ChildProcess.spawn(process.execPath, [bin, "serve"], {
          cwd: projectRoot,
          env: environment({ ...home.env, ...smallServerEnv, NATIVEGEN_CLUSTER: address, ...env }),
          stdio: ["ignore", "pipe", "pipe"],
          detached: true
        })
        child.stdout.setEncoding("utf8").on("data", (s: string) => (output += s))
        child.stderr.setEncoding("utf8").on("data", (s: string) => (output += s))
        child.on("close", (code, signal) => {
          exit = { code, signal }
          for (const w of waiters.splice(0)) w()
        })
        return child
      }),
      (child) =>
        Effect.gen(function*() {
          if (exit !== undefined) return
          yield* signal(child.pid!, "SIGINT")
          yield* exited.pipe(Effect.timeout("20 seconds"), Effect.orElse(() => signal(child.pid!, "SIGKILL")))
        })
    )
    const exited = Effect.async<{ code: number | null; signal: NodeJS.Signals | null }>((resume) => {
      if (exit !== undefined) return resume(Effect.succeed(exit))
      waiters.push(() => resume(Effect.succeed(exit!)))
    })
    yield* Effect.suspend(() =>
      /ready \(engine 1, pid \d+/.test(output)
        ? Effect.void
        : exit !== undefined
        ? Effect.die(new Error(`runner ${name} exited:\n${output}`))
        : Effect.fail("not yet")
    ).pipe(
      Effect.retry(Schedule.spaced("100 millis").pipe(Schedule.upTo("240 seconds"))),
      Effect.catchAll(() => Effect.die(new Error(`runner ${name} was not ready:\n${output}`)))
    )
    const context = yield* Layer.build(Client.layer({ socketPath: Path.join(home.env.XDG_RUNTIME_DIR!, "nativegen", "nativegen.sock") })).pipe(
      Effect.orDie
    )
    return {
      name,
      stored: `${address}:0`,
      pid: child.pid!,
      provider: Context.get(context, Provider),
      log: () => output,
      signal: (name: NodeJS.Signals) =>
        Effect.sync(() => {
          try {
            process.kill(child.pid!, name)
          } catch {}
        }),
      exited
    }
  })

const signal = (pid: number, name: NodeJS.Signals) =>
  Effect.sync(() => {
    try {
      process.kill(-pid, name)
    } catch {}
  })

/** The env of a runner in a cluster of `shards` shards over the SQLite file `storage`. */
export const clusterEnv = (storage: string, shards: number, more: Record<string, string> = {}) => ({
  NATIVEGEN_CLUSTER_STORAGE: storage,
  NATIVEGEN_CLUSTER_SHARDS: String(shards),
  ...more
})

/**
 * A client-only Sharding and the SQL client over the storage (conversations' shards, shard locks).
 * Building it creates the runner storage's tables (and the placements'), so runners started after
 * it create none: on SQLite, runners that create tables at the same moment can stall
 * (docs/cluster.md).
 */
export const viewLayer = (storage: Storage.StorageSpec, shards: number) =>
  Layer.tap(Runner.layerClientOnly({ storage, shards }), (context) => Effect.provide(Placement.createTable, context).pipe(Effect.orDie))

/** A runner's load as it answers a probe (through the work entity of a shard it holds now). */
export const loadOf = (runner: Pick<RunnerProcess, "name" | "stored">, shards: number) =>
  Effect.gen(function*() {
    const snapshot = yield* Status.snapshot
    const held = [...(snapshot.shards ?? [])].find(([, holder]) => holder === runner.stored)
    if (held === undefined) return yield* Effect.fail(`${runner.name} holds no shard`)
    const shard = Number(held[0].slice(held[0].lastIndexOf(":") + 1))
    const ids = WorkEntity.idsByShard(yield* Sharding, shards)
    return yield* (yield* WorkEntity.Work.client)(ids[shard - 1]!).Load()
  })

/** The shard locks once exactly `runners` hold them all, unchanged over two reads (settle.ts). */
export const settled = (runners: ReadonlyArray<RunnerProcess>, shards: number) => shardLocks(runners.map((r) => r.stored), shards)

/**
 * The newest generation a runner finished, as its readiness lists it (undefined before any). Its
 * list keeps the last 64: a count of them stops growing there, the newest sample does not.
 */
export const newestGeneration = (runner: RunnerProcess) => Effect.map(runner.provider.readiness, (r) => r.recentGenerations?.at(-1))

/** How many generations a runner has finished (its readiness lists the last 64). */
export const generationsOf = (runner: RunnerProcess) => Effect.map(runner.provider.readiness, (r) => r.recentGenerations?.length ?? 0)
