/**
 * What the runner storage says about the cluster: the registered runners (with their health and
 * last heartbeat) and which runner holds the lock of each shard. A conversation's shard comes from
 * Sharding's own hash (`Sharding.getShardId`), so `ownerOf` needs a Sharding (a client-only one
 * does).
 *
 * Shard locks on SQLite (and on PostgreSQL with advisory locks off) are rows naming their runner.
 * On PostgreSQL they are advisory locks, held by one server session per runner: the server's
 * `pg_locks` shows each granted lock and its session, not the runner. Each session is named by the
 * runner whose shards (as Sharding assigns them: the healthy runners on a hash ring) it holds most
 * of, one session per runner (`sessionsToRunners`); a session matching no runner (a runner still
 * holding shards it is about to give up while another one joins, say) is shown as
 * `pg-session:PID`. Settled, each runner's session holds exactly its assigned shards, so the names
 * are exact; `locks` says which kind was read.
 */
import * as ClusterRunner from "@effect/cluster/Runner"
import { Sharding } from "@effect/cluster/Sharding"
import { ShardingConfig } from "@effect/cluster/ShardingConfig"
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { conversationShard } from "./ConversationEntity.js"
import { assignments } from "./Load.js"
import { storedAddress } from "./Placement.js"
import { tablePrefix } from "./Storage.js"


export interface RunnerRow {
  /** As stored: `HOST:PORT`, or `PATH:0` for a Unix socket. */
  readonly address: string
  readonly healthy: boolean
  readonly lastHeartbeat: string
}

export interface ClusterSnapshot {
  readonly runners: ReadonlyArray<RunnerRow>
  /** Shard id (`group:n`) -> the address holding its lock; absent where the locks cannot be read. */
  readonly shards: ReadonlyMap<string, string> | undefined
  /** Where `shards` came from: lock rows, or PostgreSQL's advisory locks (sessions named by matching). */
  readonly locks: "rows" | "advisory" | undefined
}

/**
 * A heartbeat as SQLite stores it (`YYYY-MM-DD HH:MM:SS`, UTC); PostgreSQL's driver gives a Date
 * (its TIMESTAMP read as UTC here), written the same way.
 */
const heartbeatText = (value: string | Date) => value instanceof Date ? value.toISOString().slice(0, 19).replace("T", " ") : String(value)

/**
 * The shard groups as the runners configure them (nativegen sets none: effect's default). Their
 * advisory lock numbers are @effect/cluster's (SqlRunnerStorage): group i of the sorted groups,
 * shard n -> (i + 1) * 1_000_000 + n.
 */
const shardGroups = ["default"] as const
const shardOfLock = (lock: number): string | undefined => {
  const group = shardGroups[Math.floor(lock / 1_000_000) - 1]
  const n = lock % 1_000_000
  return group === undefined || n < 1 ? undefined : `${group}:${n}`
}

/**
 * Names the lock-holding sessions: each session goes to the runner whose assigned shards it holds
 * most of (largest overlap first, one session per runner, ties to the lower address); a session
 * that overlaps no unclaimed runner's assignment stays unnamed. Returns session -> runner address.
 */
export const sessionsToRunners = (
  held: ReadonlyMap<number, ReadonlySet<string>>,
  assigned: ReadonlyMap<string, ReadonlySet<string>>
): Map<number, string> => {
  const pairs: Array<{ session: number; runner: string; overlap: number }> = []
  for (const [session, shards] of held) {
    for (const [runner, own] of assigned) {
      let overlap = 0
      for (const shard of shards) if (own.has(shard)) overlap++
      if (overlap > 0) pairs.push({ session, runner, overlap })
    }
  }
  pairs.sort((a, b) => b.overlap - a.overlap || (a.runner < b.runner ? -1 : a.runner > b.runner ? 1 : a.session - b.session))
  const named = new Map<number, string>()
  const taken = new Set<string>()
  for (const p of pairs) {
    if (named.has(p.session) || taken.has(p.runner)) continue
    named.set(p.session, p.runner)
    taken.add(p.runner)
  }
  return named
}

interface RunnerSqlRow {
  readonly address: string
  readonly runner: string
  readonly healthy: number | boolean
  readonly last_heartbeat: string | Date
}

const heartbeatMillis = (value: string | Date) => value instanceof Date ? value.getTime() : Date.parse(String(value).replace(" ", "T"))

/**
 * The runners Sharding assigns shards to: healthy, and with a heartbeat younger than the lock
 * expiry (SqlRunnerStorage lists no others). A SIGKILLed runner keeps its row, often still marked
 * healthy (its heartbeat went stale before the health check marked it): counted, it took a share
 * of the assignment and the live runners' sessions were named after the wrong runner (a restarted
 * runner was shown holding nothing; the PostgreSQL kill tally waited 90 s for it and failed). Ages
 * are taken against the newest heartbeat (all written by the storage's own clock).
 */
export const liveRunners = <R extends { readonly healthy: number | boolean; readonly last_heartbeat: string | Date }>(
  rows: ReadonlyArray<R>,
  lockExpirationMillis: number
): ReadonlyArray<R> => {
  const beats = rows.map((r) => heartbeatMillis(r.last_heartbeat))
  const newest = Math.max(...beats.filter((b) => !Number.isNaN(b)))
  return rows.filter((r, i) => Boolean(r.healthy) && !(newest - beats[i]! > lockExpirationMillis))
}

/**
 * PostgreSQL's granted advisory locks of this database that are shard locks, named by runner
 * (see the module header); undefined where the shard count is unknown (no ShardingConfig).
 */
const advisoryShards = (rows: ReadonlyArray<RunnerSqlRow>) =>
  Effect.gen(function*() {
    const config = yield* Effect.serviceOption(ShardingConfig)
    if (Option.isNone(config)) return undefined
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const locks = yield* sql<{ objid: number | string; pid: number }>`
      SELECT objid, pid FROM pg_locks
      WHERE locktype = 'advisory' AND granted AND classid = 0 AND objsubid = 1
        AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`
    const held = new Map<number, Set<string>>()
    for (const lock of locks) {
      const shard = shardOfLock(Number(lock.objid))
      if (shard === undefined || Number(shard.slice(shard.indexOf(":") + 1)) > config.value.shardsPerGroup) continue
      held.set(lock.pid, (held.get(lock.pid) ?? new Set()).add(shard))
    }
    const live = liveRunners(rows, Duration.toMillis(Duration.decode(config.value.shardLockExpiration)))
    const runners = live.map((r) => [ClusterRunner.Runner.decodeSync(r.runner), true] as const)
    const assigned = new Map<string, Set<string>>()
    for (const group of shardGroups) {
      const owners = assignments(runners, group, config.value.shardsPerGroup) ?? []
      owners.forEach((address, i) => {
        const key = storedAddress(address)
        assigned.set(key, (assigned.get(key) ?? new Set()).add(`${group}:${i + 1}`))
      })
    }
    const named = sessionsToRunners(held, assigned)
    const shards = new Map<string, string>()
    for (const [session, own] of held) for (const shard of own) shards.set(shard, named.get(session) ?? `pg-session:${session}`)
    return shards
  })

/** Reads runners and shard locks from the runner storage. */
export const snapshot: Effect.Effect<ClusterSnapshot, SqlError, SqlClient.SqlClient> = Effect.gen(function*() {
  const sql = (yield* SqlClient.SqlClient).withoutTransforms()
  const runners = yield* sql<RunnerSqlRow>`
    SELECT address, runner, healthy, last_heartbeat FROM ${sql(`${tablePrefix}_runners`)} ORDER BY address`
  const locks = yield* Effect.option(sql<{ shard_id: string; address: string }>`
    SELECT shard_id, address FROM ${sql(`${tablePrefix}_locks`)}`)
  const advisory = locks._tag === "Some" ? undefined : yield* sql.onDialectOrElse({
    pg: () => advisoryShards(runners),
    orElse: () => Effect.succeed(undefined)
  })
  return {
    runners: runners.map((r) => ({ address: r.address, healthy: Boolean(r.healthy), lastHeartbeat: heartbeatText(r.last_heartbeat) })),
    shards: locks._tag === "Some" ? new Map(locks.value.map((l) => [l.shard_id, l.address])) : advisory,
    locks: locks._tag === "Some" ? "rows" : advisory === undefined ? undefined : "advisory"
  }
})

/** The shard a conversation's entity lives in (`group:n`). */
export const shardOf = (conversation: string): Effect.Effect<string, never, Sharding> =>
  Effect.map(Sharding, (sharding) => conversationShard(sharding, conversation).toString())

/** The address of the runner holding a conversation's shard, when the storage shows shard locks and one holds it. */
export const ownerOf = (
  snapshot: ClusterSnapshot,
  conversation: string
): Effect.Effect<string | undefined, never, Sharding> =>
  Effect.map(shardOf(conversation), (shard) => snapshot.shards?.get(shard))
