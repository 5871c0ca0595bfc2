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
 */
import * as RunnerStorage from "@effect/cluster/RunnerStorage"
import * as SqlRunnerStorage from "@effect/cluster/SqlRunnerStorage"
import type * as ShardingConfig from "@effect/cluster/ShardingConfig"
import * as SqlClient from "@effect/sql/SqlClient"
import { SqlError } from "@effect/sql/SqlError"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type { StorageSpec } from "./StorageSpec.js"
import * as Schedule from "effect/Schedule"
import type * as Libsql from "@libsql/client"
import * as Fs from "node:fs"
import * as Path from "node:path"

export { describeStorage, InvalidStorage, parseStorage, type StorageSpec } from "./StorageSpec.js"

const retryBusy = Schedule.exponential("10 millis").pipe(Schedule.jittered, Schedule.intersect(Schedule.recurs(6)))

/**
 * At start, runners starting together all create the tables and switch the file to WAL; on a
 * loaded machine one may hold the write lock for a while: keep trying for up to 15 s.
 */
export const retryStart = Schedule.exponential("20 millis").pipe(
  Schedule.jittered,
  Schedule.union(Schedule.spaced("500 millis")),
  Schedule.upTo("15 seconds")
)

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

/** The SQL client of a storage spec. SQLite files are switched to WAL (readers never wait for a writer). */
export const layerSqlClient = (spec: StorageSpec): Layer.Layer<SqlClient.SqlClient, SqlError> =>
  spec._tag === "Postgres"
    ? Layer.unwrapEffect(Effect.promise(() => import("@effect/sql-pg/PgClient")).pipe(
      Effect.map((PgClient) => PgClient.layer({ url: spec.url, applicationName: "nativegen-runner" }))
    ))
    : Layer.unwrapEffect(Effect.promise(() => Promise.all([import("@effect/sql-libsql/LibsqlClient"), import("@libsql/client")])).pipe(
      Effect.map(([LibsqlClient, Libsql]) => {
        const wal = Layer.effectDiscard(Effect.flatMap(SqlClient.SqlClient, (sql) =>
          Effect.retry(sql`PRAGMA journal_mode = WAL`, retryStart)
        ))
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
  let current: Libsql.Client | undefined
  let closed = false
  const use = async <A>(run: (connection: Libsql.Client) => Promise<A>): Promise<A> => {
    if (closed) throw new Error("the runner storage's SQLite client is closed")
    const connection = current ?? open()
    current = connection
    try {
      return await run(connection)
    } catch (error) {
      if (current === connection) current = undefined
      connection.close()
      throw error
    }
  }
  const close = () => {
    closed = true
    current?.close()
    current = undefined
  }
  return { use, close }
}

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
      idle = undefined
      try {
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
 * The runner storage over `spec`, with its SQL client; its tables are created when missing
 * (retried while another runner creates them).
 */
export const layer = (
  spec: StorageSpec
): Layer.Layer<RunnerStorage.RunnerStorage | SqlClient.SqlClient, SqlError, ShardingConfig.ShardingConfig> =>
  Layer.scoped(
    RunnerStorage.RunnerStorage,
    Effect.map(Effect.retry(SqlRunnerStorage.make({ prefix: tablePrefix }), retryStart), retrying)
  ).pipe(Layer.provideMerge(layerSqlClient(spec)), Layer.mapError(withCause))
