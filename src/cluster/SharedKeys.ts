/**
 * HTTP conversation keys shared by the cluster's runners: each key's last turn (the messages and
 * the turn's checkpoint, src/http/KeyedConversations.ts) kept in the runner storage
 * (`nativegen_cluster_http_keys`), so a client that sends its next request to another runner
 * with the same key continues its conversation there (the turn then runs on the runner holding
 * the conversation, as every turn does, and reuses its KV).
 *
 * A turn is written before its Done chunk is passed on (one upsert per turn, never per token).
 * At most `maxKeys` keys are kept, the least recently written dropped first (pruned beside the
 * write). A failed read or write is logged and counts as a key not known: the request runs as a
 * plain turn of its conversation, nothing fails.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as Effect from "effect/Effect"
import * as FiberSet from "effect/FiberSet"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import { KeyedTurn, KeyedTurns, MAX_KEYS } from "../http/KeyedConversations.js"
import { atStart, type StartUp, type StorageBusy, tablePrefix } from "./Storage.js"

export const table = `${tablePrefix}_http_keys`

/** Keys the cluster remembers at once: a single server's bound for each of up to 8 runners. */
export const maxKeys = MAX_KEYS * 8

/** Creates the table when missing (`Storage.atStart`: retried while another runner writes or creates it). */
export const createTable: Effect.Effect<void, SqlError | StorageBusy, SqlClient.SqlClient | StartUp> = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  atStart(sql`CREATE TABLE IF NOT EXISTS ${sql(table)} (
    key TEXT PRIMARY KEY,
    turn TEXT NOT NULL,
    updated_at TEXT NOT NULL
  )`.pipe(
    Effect.zipRight(sql`CREATE INDEX IF NOT EXISTS ${sql(`${table}_updated`)} ON ${sql(table)} (updated_at)`)
  ))
).pipe(Effect.asVoid)

const TurnJson = Schema.parseJson(KeyedTurn)
const encodeTurn = Schema.encodeSync(TurnJson)
const decodeTurn = Schema.decodeUnknownOption(TurnJson)

const retryWrite = Schedule.exponential("10 millis").pipe(Schedule.jittered, Schedule.intersect(Schedule.recurs(4)))

export const make = (options: { readonly maxKeys?: number } = {}) =>
  Effect.gen(function*() {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const bound = options.maxKeys ?? maxKeys
    yield* createTable
    // One prune at a time, beside the writes (a write never waits for it).
    const pruning = yield* FiberSet.make()
    let pruneRunning = false
    const logged = (what: string, key: string) => <A>(effect: Effect.Effect<A, SqlError>) =>
      effect.pipe(
        Effect.catchAllCause((cause) =>
          Effect.logWarning(`cluster: an HTTP conversation key's turn was not ${what}`, cause).pipe(
            Effect.annotateLogs({ service: "SharedKeys", key }),
            Effect.as(undefined)
          )
        )
      )
    const prune = sql`DELETE FROM ${sql(table)} WHERE key NOT IN (
      SELECT key FROM ${sql(table)} ORDER BY updated_at DESC LIMIT ${bound})`.pipe(
      Effect.retry(retryWrite),
      Effect.catchAllCause((cause) => Effect.logWarning("cluster: old HTTP conversation keys were not pruned", cause)),
      Effect.ensuring(Effect.sync(() => (pruneRunning = false)))
    )
    const startPrune = Effect.suspend(() => {
      if (pruneRunning) return Effect.void
      pruneRunning = true
      return FiberSet.run(pruning, prune)
    })
    return KeyedTurns.of({
      get: (key) =>
        sql<{ turn: string }>`SELECT turn FROM ${sql(table)} WHERE key = ${key}`.pipe(
          Effect.map((rows) => rows[0] === undefined ? undefined : Option.getOrUndefined(decodeTurn(rows[0].turn))),
          logged("read", key),
          Effect.withSpan("SharedKeys.get")
        ),
      set: (key, turn) =>
        sql`INSERT INTO ${sql(table)} (key, turn, updated_at) VALUES (${key}, ${encodeTurn(turn)}, ${new Date().toISOString()})
          ON CONFLICT (key) DO UPDATE SET turn = excluded.turn, updated_at = excluded.updated_at`.pipe(
          Effect.retry(retryWrite),
          Effect.zipRight(startPrune),
          logged("kept", key),
          Effect.asVoid,
          Effect.withSpan("SharedKeys.set")
        )
    })
  })

/** The cluster-wide keys over the runner storage's SQL client, for the HTTP APIs of this runner. */
export const layer: Layer.Layer<KeyedTurns, SqlError | StorageBusy, SqlClient.SqlClient | StartUp> = Layer.scoped(KeyedTurns, make())
