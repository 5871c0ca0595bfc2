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
            const open = () => Libsql.createClient({ url: `file:${spec.file}` })
            return waitingForWriters(open(), open)
          }),
          (client) => Effect.sync(() => client.close())
        )
        return Layer.provideMerge(
          wal,
          Layer.unwrapScoped(Effect.map(live, (liveClient) => LibsqlClient.layer({ liveClient })))
        )
      })
    ))

/** How long a write transaction waits for another runner's to end before it fails. */
export const writerWait = 60_000

/**
 * SQLITE_BUSY and its extended codes (BUSY_RECOVERY: a connection is recovering the WAL of a
 * runner that died mid-write; BUSY_SNAPSHOT), and SQLITE_LOCKED: all mean "wait and try again".
 */
const isBusy = (error: unknown) => {
  if (!(error instanceof Error)) return false
  const code = "code" in error && typeof error.code === "string" ? error.code : ""
  const raw = "rawCode" in error && typeof error.rawCode === "number" ? error.rawCode & 0xff : -1
  return code.startsWith("SQLITE_BUSY") || code.startsWith("SQLITE_LOCKED") || raw === 5 || raw === 6
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
 * The libsql client with write transactions that wait for another process's to end, all on one
 * connection of their own (@effect/sql-libsql runs one transaction at a time per client), closed
 * with the client. libsql has no busy timeout, so BEGIN IMMEDIATE fails at once while another
 * runner writes; then @effect/sql-libsql 0.42 never gives back the permit it took for the
 * transaction (every later query of the client waits forever: the runner stops refreshing its
 * shard locks), and the failed statement stays in progress on its connection (a later COMMIT there
 * fails, leaving the write lock held). So a connection whose BEGIN (or COMMIT, ROLLBACK) failed is
 * closed and replaced (`open`), and the BEGIN is retried with backoff for up to `writerWait`.
 */
export const waitingForWriters = (client: Libsql.Client, open: () => Libsql.Client): Libsql.Client => {
  let idle: Libsql.Client | undefined
  const transaction = async (mode: Libsql.TransactionMode = "write"): Promise<Libsql.Transaction> => {
    const deadline = Date.now() + writerWait
    for (let delay = 2;; delay = Math.min(delay * 2, 100)) {
      const connection = idle ?? open()
      idle = undefined
      try {
        await connection.execute(beginOf(mode))
      } catch (error) {
        connection.close()
        if (!isBusy(error) || Date.now() > deadline) throw error
        await new Promise((resolve) => setTimeout(resolve, delay * (0.5 + Math.random())))
        continue
      }
      return new TransactionOn(connection, (sound) => {
        if (sound && idle === undefined && !client.closed) idle = connection
        else connection.close()
      })
    }
  }
  const close = () => {
    idle?.close()
    idle = undefined
    client.close()
  }
  return new Proxy(client, {
    get(target, property, receiver) {
      if (property === "transaction") return transaction
      if (property === "close") return close
      const value: unknown = Reflect.get(target, property, receiver)
      return typeof value === "function" ? value.bind(target) : value
    }
  })
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
