/**
 * Where conversations were last served: each runner records, when a conversation's entity starts
 * on it (its first turn there), the conversation and its own address in the runner storage
 * (`nativegen_cluster_conversations`), for `nativegen cluster status`. The write runs beside the
 * turn (the turn never waits for it), once per activation of the entity (no other runner serves the
 * conversation while the entity lives here), and a failed write is logged, not raised.
 */
import type { RunnerAddress } from "@effect/cluster/RunnerAddress"
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as FiberSet from "effect/FiberSet"
import * as Layer from "effect/Layer"
import * as Schedule from "effect/Schedule"
import { atStart, type StartUp, type StorageBusy, tablePrefix } from "./Storage.js"

export const table = `${tablePrefix}_conversations`

export class Placement extends Context.Tag("nativegen/cluster/Placement")<Placement, {
  /** Records that `conversation` is served on this runner (in the background). */
  readonly record: (conversation: string) => Effect.Effect<void>
}>() {}

/**
 * Creates the table when missing (`Storage.atStart`: retried while another runner writes or
 * creates it). Outside a transaction: `CREATE TABLE IF NOT EXISTS` of a table that exists takes no
 * write lock, so a runner restarting while others write starts without waiting for them (a
 * transaction's BEGIN IMMEDIATE took the lock at every start: the runner that gave up after 15 s
 * of SQLITE_BUSY in CI). A statement that fails closes its connection (Storage.sharedConnection).
 */
export const createTable: Effect.Effect<void, SqlError | StorageBusy, SqlClient.SqlClient | StartUp> = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) =>
    atStart(sql`CREATE TABLE IF NOT EXISTS ${sql(table)} (
    conversation TEXT PRIMARY KEY,
    address TEXT NOT NULL,
    updated_at TEXT NOT NULL
  )`)
).pipe(Effect.asVoid)

/** The address as the runner storage writes it (`HOST:PORT`, `PATH:0`). */
export const storedAddress = (address: RunnerAddress) => `${address.host}:${address.port}`

export const make = (address: RunnerAddress) =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    yield* createTable
    const writes = yield* FiberSet.make()
    const at = storedAddress(address)
    const write = (conversation: string) =>
      // In a transaction: see Load.ts's publishing for why.
      sql.withTransaction(sql`INSERT INTO ${sql(table)} (conversation, address, updated_at)
        VALUES (${conversation}, ${at}, ${new Date().toISOString()})
        ON CONFLICT (conversation) DO UPDATE SET address = excluded.address, updated_at = excluded.updated_at`).pipe(
        Effect.retry(Schedule.exponential("10 millis").pipe(Schedule.jittered, Schedule.intersect(Schedule.recurs(4)))),
        Effect.catchAllCause((cause) =>
          Effect.logWarning("cluster: the conversation's placement was not recorded", cause).pipe(
            Effect.annotateLogs({ service: "Placement", conversation })
          )
        )
      )
    return Placement.of({ record: (conversation) => FiberSet.run(writes, write(conversation)).pipe(Effect.asVoid) })
  })

export const layer = (address: RunnerAddress): Layer.Layer<Placement, SqlError | StorageBusy, SqlClient.SqlClient | StartUp> =>
  Layer.scoped(Placement, make(address))

/** Placements as recorded, most recent first. */
export const list = Effect.gen(function*() {
  const sql = (yield* SqlClient.SqlClient).withoutTransforms()
  return yield* sql<{ conversation: string; address: string; updated_at: string }>`
    SELECT conversation, address, updated_at FROM ${sql(table)} ORDER BY updated_at DESC`.pipe(
    // No table yet: no turn was served.
    Effect.orElseSucceed(() => [])
  )
})
