/**
 * Where runners meet: the runner storage @effect/cluster keeps its runners, their health and the
 * shard locks in. SQLite through libsql for one host (a file all runners open; nothing to install:
 * libsql's native library comes as a per-platform npm package), PostgreSQL for several machines.
 *
 * libsql sets no busy timeout, so a write that meets another runner's write fails at once with
 * SQLITE_BUSY: a write transaction's BEGIN waits for the other writer (`waitingForWriters`, which
 * also keeps transactions on one connection instead of libsql's new one each time), and every
 * runner-storage call is retried a few times with jittered backoff (also on PostgreSQL, where it
 * costs nothing when nothing fails). The connections are closed with the layer's scope.
 *
 * Every statement a runner runs at start (the WAL switch, the tables: @effect/cluster's and ours)
 * goes through `StartUp`, provided with the SQL client: on SQLITE_BUSY it is retried with jittered
 * backoff for up to `startWait`, then fails with `StorageBusy` naming the storage and the wait.
 */
import * as RunnerStorage from "@effect/cluster/RunnerStorage"
import * as SqlRunnerStorage from "@effect/cluster/SqlRunnerStorage"
import type * as ShardingConfig from "@effect/cluster/ShardingConfig"
import * as SqlClient from "@effect/sql/SqlClient"
import { SqlError } from "@effect/sql/SqlError"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Random from "effect/Random"
import { describeStorage, type StorageSpec } from "./StorageSpec.js"
import * as Schedule from "effect/Schedule"
import type * as Libsql from "@libsql/client"
import * as Fs from "node:fs"
import * as Path from "node:path"

export { describeStorage, InvalidStorage, parseStorage, type StorageSpec } from "./StorageSpec.js"

const retryBusy = Schedule.exponential("10 millis").pipe(Schedule.jittered, Schedule.intersect(Schedule.recurs(6)))

/**
 * A statement's retries for up to 15 s, whatever its failure (a table created on first use,
 * Transcripts; at start, `StartUp` retries other failures so, and SQLITE_BUSY longer).
 */
export const retryStart = Schedule.exponential("20 millis").pipe(
  Schedule.jittered,
  Schedule.union(Schedule.spaced("500 millis")),
  Schedule.upTo("15 seconds")
)

/**
 * How long a start-up statement keeps trying while another process holds the SQLite write lock.
 * A write holds it for milliseconds; runners starting or restarting together on a loaded machine
 * hold it in turns for much longer (the last CI run: a runner gave up after 15 s and exited).
 */
export const startWait = Duration.seconds(60)

/** How long a start-up statement keeps trying on any other failure (a server still starting, a catalog race). */
export const startOtherWait = Duration.seconds(15)

/** A runner's start gave up: another process kept the storage's write lock for the whole wait. */
export class StorageBusy extends Data.TaggedError("StorageBusy")<{
  /** The storage, as logs show it (`sqlite /path/cluster.db`). */
  readonly storage: string
  /** How long the statement kept trying, in milliseconds. */
  readonly waitedMillis: number
  /** The bound it gave up at, in milliseconds. */
  readonly limitMillis: number
  /** The driver's last failure (SQLITE_BUSY). */
  readonly cause: unknown
}> {
  override get message() {
    return `runner storage ${this.storage}: the database stayed locked by another process (SQLITE_BUSY) for ` +
      `${(this.waitedMillis / 1000).toFixed(1)} s at start (limit ${(this.limitMillis / 1000).toFixed(0)} s); not started`
  }
}

/**
 * Runs a start-up statement until it succeeds: on SQLITE_BUSY (another runner writing) with jittered
 * exponential backoff (20 ms, doubling, at most 500 ms apart) for up to `wait`, then `StorageBusy`;
 * on any other failure for up to `startOtherWait` (then that failure). Interruptible while it waits.
 */
export const retryingAtStart = (storage: string, wait: Duration.DurationInput = startWait) =>
<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | StorageBusy, R> =>
  Effect.gen(function*() {
    const started = yield* Clock.currentTimeMillis
    const busyLimit = Duration.toMillis(Duration.decode(wait))
    const otherLimit = Duration.toMillis(startOtherWait)
    for (let delay = 20;; delay = Math.min(delay * 2, 500)) {
      const result = yield* Effect.either(effect)
      if (Either.isRight(result)) return result.right
      const waited = (yield* Clock.currentTimeMillis) - started
      if (isBusy(result.left)) {
        if (waited >= busyLimit) {
          return yield* new StorageBusy({ storage, waitedMillis: waited, limitMillis: busyLimit, cause: result.left })
        }
      } else if (waited >= otherLimit) {
        return yield* Effect.fail(result.left)
      }
      const jittered = delay * (0.5 + (yield* Random.next))
      yield* Effect.sleep(Duration.millis(Math.min(jittered, Math.max(0, (isBusy(result.left) ? busyLimit : otherLimit) - waited))))
    }
  })

/**
 * How a runner runs its start-up statements (`retryingAtStart` over its storage), provided with its
 * SQL client so that every module creating a table at start (SqlRunnerStorage, Placement,
 * SharedKeys) retries the same way and names the same storage when it gives up.
 */
export class StartUp extends Context.Tag("nativegen/cluster/StartUp")<StartUp, {
  /** The storage, as logs show it. */
  readonly storage: string
  readonly run: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | StorageBusy, R>
}>() {}

/** The start-up retry over `spec`; `wait`: how long SQLITE_BUSY is retried (default `startWait`). */
export const startUp = (spec: StorageSpec, wait: Duration.DurationInput = startWait): StartUp["Type"] => {
  const storage = describeStorage(spec)
  return StartUp.of({ storage, run: retryingAtStart(storage, wait) })
}

/** Runs a start-up statement with the runner's `StartUp`. */
export const atStart = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | StorageBusy, R | StartUp> =>
  Effect.flatMap(StartUp, (startUp) => startUp.run(effect))

/** Each call retried on a persistence failure (a concurrent writer), then failing as before. */
const retrying = (storage: RunnerStorage.RunnerStorage["Type"]): RunnerStorage.RunnerStorage["Type"] => {
  const retry = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.retry(effect, retryBusy)
  return RunnerStorage.RunnerStorage.of({
    register: (runner, healthy) => retry(storage.register(runner, healthy)),
    unregister: (address) => retry(storage.unregister(address)),
    getRunners: retry(storage.getRunners),
    setRunnerHealth: (address, healthy) => retry(storage.setRunnerHealth(address, healthy)),
    acquire: (address, shardIds) => retry(storage.acquire(address, shardIds)),
    refresh: (address, shardIds) => retry(storage.refresh(address, shardIds)),
    release: (address, shardId) => retry(storage.release(address, shardId)),
    releaseAll: (address) => retry(storage.releaseAll(address))
  })
}

/**
 * The SQL client of a storage spec, with the runner's `StartUp` over it. SQLite files are switched
 * to WAL (readers never wait for a writer). `startWait`: how long a start-up statement retries
 * SQLITE_BUSY (default `startWait`).
 */
export const layerSqlClient = (
  spec: StorageSpec,
  options: { readonly startWait?: Duration.DurationInput } = {}
): Layer.Layer<SqlClient.SqlClient | StartUp, SqlError | StorageBusy> =>
  Layer.provideMerge(layerSqlClientOnly(spec), Layer.succeed(StartUp, startUp(spec, options.startWait)))

const layerSqlClientOnly = (spec: StorageSpec): Layer.Layer<SqlClient.SqlClient, SqlError | StorageBusy, StartUp> =>
  spec._tag === "Postgres"
    ? Layer.unwrapEffect(Effect.promise(() => import("@effect/sql-pg/PgClient")).pipe(
      Effect.map((PgClient) => PgClient.layer({ url: spec.url, applicationName: "nativegen-runner" }))
    ))
    : Layer.unwrapEffect(Effect.promise(() => Promise.all([import("@effect/sql-libsql/LibsqlClient"), import("@libsql/client")])).pipe(
      Effect.map(([LibsqlClient, Libsql]) => {
        const wal = Layer.effectDiscard(Effect.flatMap(SqlClient.SqlClient, (sql) => atStart(sql`PRAGMA journal_mode = WAL`)))
        const live = Effect.acquireRelease(
          Effect.sync(() => {
            Fs.mkdirSync(Path.dirname(spec.file), { recursive: true })
            return waitingForWriters(() => Libsql.createClient({ url: `file:${spec.file}` }))
          }),
          (client) => Effect.sync(() => client.close())
        )
        return Layer.provideMerge(
          wal,
          Layer.unwrapScoped(Effect.map(live, (liveClient) => LibsqlClient.layer({ liveClient })))
        )
      })
    ))

/**
 * How long a write transaction's BEGIN waits for another runner's write to end. @effect/sql-libsql
 * takes the client's permit and begins uninterruptibly, so this bounds how long a refresh that
 * timed out can hold its runner: well under a detection time (a write holds the lock for
 * milliseconds; only a stuck connection held it longer, see `sharedConnection`).
 */
export const writerWait = 2_000

/**
 * SQLITE_BUSY (here or in the error's causes) and its extended codes (BUSY_RECOVERY: a connection is recovering the WAL of a
 * runner that died mid-write; BUSY_SNAPSHOT), and SQLITE_LOCKED: all mean "wait and try again".
 */
export const isBusy = (error: unknown): boolean => {
  if (typeof error !== "object" || error === null) return false
  const code = "code" in error && typeof error.code === "string" ? error.code : ""
  const raw = "rawCode" in error && typeof error.rawCode === "number" ? error.rawCode & 0xff : -1
  if (code.startsWith("SQLITE_BUSY") || code.startsWith("SQLITE_LOCKED") || raw === 5 || raw === 6) return true
  // Wrapped (a PersistenceError's SqlError's LibsqlError): the driver's error is a cause of it.
  return "cause" in error && error.cause !== error && isBusy(error.cause)
}

/** The BEGIN of a libsql transaction mode (as @libsql/client's own). */
const beginOf = (mode: Libsql.TransactionMode) =>
  mode === "write" ? "BEGIN IMMEDIATE" : mode === "read" ? "BEGIN TRANSACTION READONLY" : "BEGIN DEFERRED"

/**
 * A write transaction on the client's transaction connection; when it ends (commit or rollback)
 * the connection is handed back with whether it is still sound (`done`). @libsql/client's own
 * transaction never closes its connection, and the client opens a new one for the next: each write
 * transaction (a shard-lock refresh, every third of the detection time) left one more connection
 * (the database file and its WAL open) until the garbage collector found it.
 */
class TransactionOn implements Libsql.Transaction {
  #ended = false
  constructor(private readonly connection: Libsql.Client, private readonly done: (sound: boolean) => void) {}
  execute(stmt: Libsql.InStatement) {
    return this.connection.execute(stmt)
  }
  async batch(stmts: Array<Libsql.InStatement>) {
    const results: Array<Libsql.ResultSet> = []
    for (const stmt of stmts) results.push(await this.connection.execute(stmt))
    return results
  }
  executeMultiple(): Promise<void> {
    return Promise.reject(new Error("executeMultiple is not used in a runner-storage transaction"))
  }
  /** Runs the statement that ends the transaction; a connection whose COMMIT or ROLLBACK failed is not reused. */
  async #end(statement: "COMMIT" | "ROLLBACK") {
    if (this.#ended) return
    this.#ended = true
    try {
      await this.connection.execute(statement)
      this.done(true)
    } catch (error) {
      this.done(false)
      throw error
    }
  }
  rollback() {
    return this.#end("ROLLBACK")
  }
  commit() {
    return this.#end("COMMIT")
  }
  close() {
    this.#end("ROLLBACK").catch(() => undefined)
  }
  get closed() {
    return this.#ended
  }
}

/**
 * A transaction that could not begin (another runner kept the write lock past `writerWait`): every
 * statement and the commit fail with BEGIN's error, the rollback succeeds. It is handed to
 * @effect/sql-libsql instead of a rejected BEGIN because, in 0.42, a BEGIN that fails never gives
 * back the permit it took (every later query of the client would wait forever); a transaction whose
 * body fails is rolled back and gives it back, and the caller sees BEGIN's SQLITE_BUSY.
 */
class NotBegun implements Libsql.Transaction {
  #closed = false
  constructor(private readonly error: unknown) {}
  execute(): Promise<Libsql.ResultSet> {
    return Promise.reject(this.error)
  }
  batch(): Promise<Array<Libsql.ResultSet>> {
    return Promise.reject(this.error)
  }
  executeMultiple(): Promise<void> {
    return Promise.reject(this.error)
  }
  rollback() {
    this.#closed = true
    return Promise.resolve()
  }
  commit() {
    this.#closed = true
    return Promise.reject(this.error)
  }
  close() {
    this.#closed = true
  }
  get closed() {
    return this.#closed
  }
}

/**
 * Why a libsql connection is dropped after any failed statement. libsql (0.4) does not reset a
 * statement that failed: one that met another runner's write lock (SQLITE_BUSY) stays "running"
 * on its connection, and while it does, SQLite never commits that connection's later autocommit
 * writes: the next write that succeeds there keeps the WAL write lock and its changes uncommitted
 * (invisible to every other runner) until the garbage collector finalizes the failed statement,
 * which in an idle runner may be never. Every other runner's writes then fail with SQLITE_BUSY for
 * good: the cluster-wide freeze ("Shard lock storage is unhealthy" on every runner at the same
 * second) seen in the SIGKILL tallies. A failed statement that met the lock holds no lock itself,
 * so closing its connection and opening a new one for the next statement is enough
 * (test/cluster/storage.test.ts reproduces it).
 */
export const sharedConnection = (open: () => Libsql.Client) => {
  let current: { readonly connection: Libsql.Client; readonly ready: Promise<void> } | undefined
  let closed = false
  const use = async <A>(run: (connection: Libsql.Client) => Promise<A>): Promise<A> => {
    if (closed) throw new Error("the runner storage's SQLite client is closed")
    const entry = current ?? opened(open())
    current = entry
    try {
      await entry.ready
      return await run(entry.connection)
    } catch (error) {
      if (current === entry) current = undefined
      entry.connection.close()
      throw error
    }
  }
  const close = () => {
    closed = true
    current?.connection.close()
    current = undefined
  }
  return { use, close }
}

/**
 * How each connection commits: `synchronous = NORMAL` (SQLite's default is FULL). In WAL mode a
 * commit then writes the log without waiting for the disk (the log is synced at checkpoints): a
 * commit survives the runner's process dying (SIGKILL included) and the file stays consistent
 * through a power loss, which may only take back the last commits (a host that loses power loses
 * its runners too). Why: libsql runs statements on the event loop, so a FULL commit held every
 * runner's loop for its fsync (COMMIT 0.76 ms median here while a test suite loaded the machine,
 * ~0.1 ms more than NORMAL when idle): each turn's transcript before its Done chunk, and each
 * shard-lock refresh. A per-connection setting, so every connection runs it first.
 */
export const connectionSettings = "PRAGMA synchronous = NORMAL"

/** A new connection, and the settings it runs before anything else. */
const opened = (connection: Libsql.Client) => ({
  connection,
  ready: connection.execute(connectionSettings).then(() => undefined)
})

/**
 * The libsql client a runner's SQL client uses (`open` makes a new connection to the file):
 *
 * - statements outside a transaction run on one shared connection, replaced after any failure
 *   (`sharedConnection`): a connection never runs a statement after one that failed;
 * - write transactions wait for another process's to end, all on one connection of their own
 *   (@effect/sql-libsql runs one transaction at a time per client), closed with the client. libsql
 *   has no busy timeout, so BEGIN IMMEDIATE fails at once while another runner writes (a busy
 *   timeout would block the event loop: libsql's statements are synchronous); the connection whose
 *   BEGIN (or COMMIT, ROLLBACK) failed is closed and replaced, and the BEGIN retried with backoff
 *   for up to `writerWait`, after which the transaction fails (`NotBegun`) and gives back its permit.
 */
export const waitingForWriters = (open: () => Libsql.Client): Libsql.Client => {
  const shared = sharedConnection(open)
  let idle: Libsql.Client | undefined
  let closed = false
  const transaction = async (mode: Libsql.TransactionMode = "write"): Promise<Libsql.Transaction> => {
    const deadline = Date.now() + writerWait
    for (let delay = 2;; delay = Math.min(delay * 2, 100)) {
      if (closed) return new NotBegun(new Error("the runner storage's SQLite client is closed"))
      const connection = idle ?? open()
      const fresh = idle === undefined
      idle = undefined
      try {
        if (fresh) await opened(connection).ready
        await connection.execute(beginOf(mode))
      } catch (error) {
        connection.close()
        if (!isBusy(error) || Date.now() > deadline) return new NotBegun(error)
        await new Promise((resolve) => setTimeout(resolve, delay * (0.5 + Math.random())))
        continue
      }
      return new TransactionOn(connection, (sound) => {
        if (sound && idle === undefined && !closed) idle = connection
        else connection.close()
      })
    }
  }
  const close = () => {
    closed = true
    idle?.close()
    idle = undefined
    shared.close()
  }
  const client: Libsql.Client = {
    execute: (stmt) => shared.use((c) => c.execute(stmt)),
    batch: (stmts, mode) => shared.use((c) => c.batch(stmts, mode)),
    migrate: (stmts) => shared.use((c) => c.migrate(stmts)),
    transaction,
    executeMultiple: (sql) => shared.use((c) => c.executeMultiple(sql)),
    sync: () => shared.use((c) => c.sync()),
    close,
    get closed() {
      return closed
    },
    protocol: "file"
  }
  return client
}

/**
 * The error with its cause in its message (the driver's own: SQLITE_BUSY, a refused connection, a
 * failed login), since the CLI prints a failure's message alone and @effect/sql's is only "Failed
 * to execute statement".
 */
export const withCause = <E>(error: E): E | SqlError => {
  if (!(error instanceof SqlError) || !(error.cause instanceof Error) || error.message.includes(error.cause.message)) return error
  const code = "code" in error.cause && typeof error.cause.code === "string" ? ` (${error.cause.code})` : ""
  return new SqlError({ cause: error.cause, message: `${error.message}: ${error.cause.message}${code}` })
}

/** The table prefix of the runner storage. */
export const tablePrefix = "nativegen_cluster"

/**
 * The runner storage over `spec`, with its SQL client and `StartUp`; its tables are created when
 * missing (`atStart`: retried while another runner writes or creates them).
 */
export const layer = (
  spec: StorageSpec,
  options: { readonly startWait?: Duration.DurationInput } = {}
): Layer.Layer<RunnerStorage.RunnerStorage | SqlClient.SqlClient | StartUp, SqlError | StorageBusy, ShardingConfig.ShardingConfig> =>
  Layer.scoped(
    RunnerStorage.RunnerStorage,
    Effect.map(atStart(SqlRunnerStorage.make({ prefix: tablePrefix })), retrying)
  ).pipe(Layer.provideMerge(layerSqlClient(spec, options)), Layer.mapError(withCause))
