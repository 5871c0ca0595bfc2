/**
 * What the runner storage says about the cluster: the registered runners (with their health and
 * last heartbeat) and which runner holds the lock of each shard. Shard locks are rows on SQLite
 * (and on PostgreSQL only with advisory locks off); with advisory locks they live in the server's
 * lock table and `shards` is absent. A conversation's shard comes from Sharding's own hash
 * (`Sharding.getShardId`), so `ownerOf` needs a Sharding (a client-only one does).
 */
import * as EntityId from "@effect/cluster/EntityId"
import { Sharding } from "@effect/cluster/Sharding"
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as Effect from "effect/Effect"
import { Conversation } from "./ConversationEntity.js"
import { tablePrefix } from "./Storage.js"


export interface RunnerRow {
  /** As stored: `HOST:PORT`, or `PATH:0` for a Unix socket. */
  readonly address: string
  readonly healthy: boolean
  readonly lastHeartbeat: string
}

export interface ClusterSnapshot {
  readonly runners: ReadonlyArray<RunnerRow>
  /** Shard id (`group:n`) -> the address holding its lock; absent where locks are advisory. */
  readonly shards: ReadonlyMap<string, string> | undefined
}

/**
 * A heartbeat as SQLite stores it (`YYYY-MM-DD HH:MM:SS`, UTC); PostgreSQL's driver gives a Date
 * (its TIMESTAMP read as UTC here), written the same way.
 */
const heartbeatText = (value: string | Date) => value instanceof Date ? value.toISOString().slice(0, 19).replace("T", " ") : String(value)

/** Reads runners and shard locks from the runner storage. */
export const snapshot: Effect.Effect<ClusterSnapshot, SqlError, SqlClient.SqlClient> = Effect.gen(function*() {
  const sql = (yield* SqlClient.SqlClient).withoutTransforms()
  const runners = yield* sql<{ address: string; healthy: number | boolean; last_heartbeat: string | Date }>`
    SELECT address, healthy, last_heartbeat FROM ${sql(`${tablePrefix}_runners`)} ORDER BY address`
  const locks = yield* Effect.option(sql<{ shard_id: string; address: string }>`
    SELECT shard_id, address FROM ${sql(`${tablePrefix}_locks`)}`)
  return {
    runners: runners.map((r) => ({ address: r.address, healthy: Boolean(r.healthy), lastHeartbeat: heartbeatText(r.last_heartbeat) })),
    shards: locks._tag === "None" ? undefined : new Map(locks.value.map((l) => [l.shard_id, l.address]))
  }
})

/** The shard a conversation's entity lives in (`group:n`). */
export const shardOf = (conversation: string): Effect.Effect<string, never, Sharding> =>
  Effect.map(Sharding, (sharding) => {
    const id = EntityId.make(conversation)
    return sharding.getShardId(id, Conversation.getShardGroup(id)).toString()
  })

/** The address of the runner holding a conversation's shard, when the storage shows shard locks and one holds it. */
export const ownerOf = (
  snapshot: ClusterSnapshot,
  conversation: string
): Effect.Effect<string | undefined, never, Sharding> =>
  Effect.map(shardOf(conversation), (shard) => snapshot.shards?.get(shard))
