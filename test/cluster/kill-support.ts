/**
 * A cluster of real `nativegen serve --cluster` processes whose runners can be SIGKILLed and
 * started again (same home, store, runner socket and public socket), for the runner-death tests
 * (kill.test.ts) and `npm run bench cluster-kill`. Each runner is its own process group, its engine
 * child another (the runtime spawns it detached): a kill SIGKILLs both groups at once, taking the
 * whole machine's share of the cluster down as a crash of the host would. One runner storage for all: a SQLite file, or a database of its own on
 * the PostgreSQL server in NATIVEGEN_TEST_POSTGRES (`storage: "postgres"`); Unix sockets only.
 */
import { assert } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as ExecutionStrategy from "effect/ExecutionStrategy"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import * as Scope from "effect/Scope"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Runner from "../../src/cluster/Runner.js"
import * as Status from "../../src/cluster/Status.js"
import type * as Storage from "../../src/cluster/Storage.js"
import * as Client from "../../src/rpc/Client.js"
import { Provider } from "../../src/services/Provider.js"
import { freshDatabase } from "./postgres.js"
import { type Home, makeHome, type Server, smallServerEnv, startServer } from "../cli/support.js"

export interface Member {
  readonly name: string
  /** The runner's address as the storage records it (`PATH:0`). */
  readonly stored: string
  /** The running process, or undefined while it is down. */
  readonly server: () => Server | undefined
  /** A client on its public socket (only while it runs). */
  readonly provider: () => Provider["Type"]
  /** SIGKILL to its process group and its engine child's; returns when both are gone. */
  readonly kill: Effect.Effect<void>
  /** Starts it again (same home and sockets) and waits until it is ready. */
  readonly start: Effect.Effect<void>
}

export class KillCluster extends Context.Tag("test/KillCluster")<KillCluster, {
  readonly members: ReadonlyArray<Member>
  readonly storage: Storage.StorageSpec
  readonly shards: number
  /** The failure detection time the runners were started with, in seconds. */
  readonly detection: number
}>() {}

export interface ClusterOptions {
  readonly names: ReadonlyArray<string>
  readonly shards: number
  readonly detection: number
  /** Extra environment for every runner. */
  readonly env?: Record<string, string>
  /** The runner storage: a SQLite file (the default) or a fresh database on NATIVEGEN_TEST_POSTGRES's server. */
  readonly storage?: "sqlite" | "postgres"
  /** One directory of conversation state files for every runner (`--cluster-conversations`); default: each its own. */
  readonly sharedConversations?: boolean
}

/** Runners sharing one storage file; each with its own home, store and public socket (and conversations directory, unless shared). */
export const layer = (options: ClusterOptions) =>
  Layer.scoped(
    KillCluster,
    Effect.gen(function*() {
      const dir = yield* Effect.acquireRelease(
        Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "ngk-"))),
        (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
      )
      const storage: Storage.StorageSpec = options.storage === "postgres"
        ? { _tag: "Postgres", url: Redacted.make(yield* freshDatabase) }
        : { _tag: "Sqlite", file: Path.join(dir, "cluster.db") }
      const members = yield* Effect.forEach(options.names, (name) =>
        Effect.gen(function*() {
          const home: Home = yield* makeHome
          const runnerSocket = Path.join(dir, `${name}.sock`)
          const env = {
            ...smallServerEnv,
            NATIVEGEN_CLUSTER: runnerSocket,
            NATIVEGEN_CLUSTER_STORAGE: storage._tag === "Sqlite" ? storage.file : Redacted.value(storage.url),
            NATIVEGEN_CLUSTER_SHARDS: String(options.shards),
            NATIVEGEN_CLUSTER_DETECTION: String(options.detection),
            ...(options.sharedConversations ? { NATIVEGEN_CLUSTER_CONVERSATIONS: Path.join(dir, "conversations") } : {}),
            ...options.env
          }
          let server: Server | undefined
          let provider: Provider["Type"] | undefined
          // Each incarnation lives in its own scope, closed when it is killed (or with the cluster).
          let incarnation: Scope.CloseableScope | undefined
          const outer = yield* Effect.scope
          const stop = Effect.suspend(() => {
            const scope = incarnation
            incarnation = undefined
            server = undefined
            provider = undefined
            return scope === undefined ? Effect.void : Scope.close(scope, Exit.void)
          })
          yield* Effect.addFinalizer(() => stop)
          const start = Effect.gen(function*() {
            const scope = yield* Scope.fork(outer, ExecutionStrategy.sequential)
            const started = yield* startServer(home, env, "240 seconds").pipe(Scope.extend(scope))
            const context = yield* Layer.buildWithScope(Client.layer({ socketPath: started.socket }), scope).pipe(Effect.orDie)
            incarnation = scope
            server = started
            provider = Context.get(context, Provider)
          })
          const kill = Effect.gen(function*() {
            const running = server
            if (running === undefined) return
            // The engine child is a process group of its own (spawned detached): killed with the runner's,
            // as a crash of the host would. Killing the runner's group alone left the engine to notice its
            // host was gone and leave 2 s later; the kill returned only then (its stdout is the runner's).
            yield* Effect.sync(() => {
              for (const group of [running.pid, running.enginePid]) {
                try {
                  process.kill(-group, "SIGKILL")
                } catch {}
              }
            })
            // Gone when the runner is reaped and its output closed (its 'close' event): the scope's release sees it exited.
            yield* stop
          })
          const member: Member = {
            name,
            stored: `${runnerSocket}:0`,
            server: () => server,
            provider: () => provider ?? assert.fail(`runner ${name} is down`),
            kill,
            start
          }
          return member
        }))
      // Started together (on a loaded machine starting is mostly waiting for CPU).
      yield* Effect.forEach(members, (m) => m.start, { concurrency: "unbounded", discard: true })
      return { members, storage, shards: options.shards, detection: options.detection }
    })
  )

/** The client-only Sharding (for conversations' shards) and the SQL client over the cluster's storage. */
export const viewLayer = Layer.unwrapEffect(
  Effect.map(KillCluster, ({ detection, shards, storage }) => Runner.layerClientOnly({ storage, shards, detection: `${detection} seconds` }))
)

/** The runner (stored address) holding each conversation's shard now, read from the shard locks. */
export const holderOf = (conversation: string) =>
  Effect.flatMap(Status.snapshot, (snapshot) => Status.ownerOf(snapshot, conversation)).pipe(Effect.orDie)

/**
 * Shard locks once the cluster settled: every shard locked, by every runner named, the same in two
 * reads a refresh interval apart.
 */
export const settled = (runners: ReadonlyArray<Member>) =>
  Effect.gen(function*() {
    const { shards } = yield* KillCluster
    const read = Effect.flatMap(Status.snapshot, (s) => {
      const owners = new Set(s.shards?.values() ?? [])
      const live = new Set(runners.map((m) => m.stored))
      return s.shards?.size === shards && runners.every((m) => owners.has(m.stored)) && [...owners].every((o) => live.has(o))
        ? Effect.succeed(s)
        : Effect.fail(`not settled: runners ${JSON.stringify(s.runners)}, locks ${JSON.stringify([...(s.shards ?? [])])}`)
    })
    const first = yield* read.pipe(Effect.retry(Schedule.spaced("250 millis").pipe(Schedule.upTo("60 seconds"))))
    yield* Effect.sleep("1500 millis")
    const second = yield* read
    return JSON.stringify([...first.shards!].sort()) === JSON.stringify([...second.shards!].sort())
      ? second
      : yield* Effect.fail("the shard locks moved")
  }).pipe(
    Effect.retry({ times: 3 }),
    Effect.catchAll((reason) =>
      Effect.dieMessage(`${reason}\n${runners.map((m) => `--- ${m.name}:\n${m.server()?.log().slice(-4000) ?? "down"}`).join("\n")}`)
    ),
    Effect.orDie
  )

/** Conversation ids `prefix-N` whose shard `member` holds in `snapshot`, `count` of them. */
export const idsOwnedBy = (snapshot: Status.ClusterSnapshot, member: Member, count: number, prefix: string) =>
  Effect.gen(function*() {
    const ids: Array<string> = []
    for (let i = 0; ids.length < count; i++) {
      const id = `${prefix}-${i}`
      if ((yield* Status.ownerOf(snapshot, id)) === member.stored) ids.push(id)
      if (i > 10_000) return yield* Effect.dieMessage(`no conversation ids for ${member.name}`)
    }
    return ids
  })
