/**
 * How loaded each runner is, as the other runners know it. Every `probeEvery` while it is active
 * (it routed by the loads or served a request for another runner in the last `activeFor`), and
 * every `restingEvery` at rest, a runner asks each other runner for its load over the cluster
 * transport: a `Load` message to the work entity
 * (WorkEntity.ts) of a shard that runner holds, answered from its Provider's readiness (engine
 * ready; the scheduler's running and queued requests and slots) with its own address and the
 * shards it holds (Sharding.hasShardId). Which runner holds which shard is computed as Sharding
 * computes it: the healthy runners in the runner storage (a read) on effect's HashRing. The
 * answer names its runner, so a shard that moved meanwhile only makes a probe land elsewhere.
 *
 * Nothing is written to the runner storage: on SQLite, writes of every runner contend for one
 * lock that @effect/cluster's shard-lock refreshes need within a second (docs/cluster.md).
 *
 * An answer also lists the ids of the requests the runner is running for other runners (its work
 * entity's one-offs and decisions), so an entry can tell which of its own requests an answer still
 * counts, however late the answer arrives (LoadRouting.reckoned).
 *
 * Why the two paces: a round is a storage read and a cluster message to and from each other runner,
 * about 10 CPU ms/s of a runner's event loop at 4 rounds a second with one other runner
 * (bench/_cluster-path.ts with IDLE_SECONDS: 23.5 CPU ms/s of the main thread at rest, 14 at one
 * round a second), spent even when nobody asks. Resting, the loads are at most `restingEvery` old
 * when a request comes, and its routing makes the runner active: the next round is at most
 * `probeEvery` away.
 *
 * An answer is fresh for `staleAfter` by this runner's clock (no clock is compared across
 * machines); a runner that does not answer drops out then. A runner that is stopping reports no
 * shards (from the start of its drain, Drain.ts) and is not chosen.
 */
import { RunnerAddress } from "@effect/cluster/RunnerAddress"
import { RunnerStorage } from "@effect/cluster/RunnerStorage"
import { Sharding } from "@effect/cluster/Sharding"
import * as ShardId from "@effect/cluster/ShardId"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as HashRing from "effect/HashRing"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import { Provider } from "../services/Provider.js"
import { Drain } from "./Drain.js"
import { storedAddress } from "./Placement.js"

/** What one runner answers about itself. */
export const RunnerLoad = Schema.Struct({
  /** As the runner storage writes addresses (`HOST:PORT`, `PATH:0`). */
  address: Schema.String,
  ready: Schema.Boolean,
  /** Requests running and queued in its scheduler (all lanes). */
  running: Schema.NonNegativeInt,
  queued: Schema.NonNegativeInt,
  slots: Schema.NonNegativeInt,
  /** Shard numbers of the default group it holds. */
  shards: Schema.Array(Schema.Int),
  /** One-off generations and decisions it served for other runners since it started. */
  served: Schema.Struct({ generations: Schema.NonNegativeInt, decisions: Schema.NonNegativeInt }),
  /** The ids of the requests it runs for other runners now (counted in `running` and `queued`). */
  serving: Schema.Array(Schema.String),
  /** Where it takes turn chunks and direct turns (ChunkChannel's sink). */
  sink: Schema.optional(RunnerAddress),
  /** Conversation turns other runners sent straight to it since it started (ChunkChannel's `Serve`). */
  directTurns: Schema.optional(Schema.NonNegativeInt)
})
export type RunnerLoad = typeof RunnerLoad.Type

/** The load that ranks runners: requests running or waiting. */
export const pending = (load: Pick<RunnerLoad, "running" | "queued">) => load.running + load.queued

export interface LoadTiming {
  /** How often a runner asks the others while it is active. */
  readonly probeEvery: Duration.DurationInput
  /** How often it asks them at rest. */
  readonly restingEvery: Duration.DurationInput
  /** How long a runner stays active after it last read the loads or served a request for another. */
  readonly activeFor: Duration.DurationInput
  /** How long an answer may take. */
  readonly probeTimeout: Duration.DurationInput
  /** An answer older than this (by the asking runner's clock) is left out. */
  readonly staleAfter: Duration.DurationInput
}

export const defaultTiming: LoadTiming = {
  probeEvery: "250 millis",
  restingEvery: "1 second",
  activeFor: "5 seconds",
  probeTimeout: "1 second",
  staleAfter: "2 seconds"
}

/**
 * Runs `round` at once and then at `timing`'s paces: every `probeEvery` while `lastActive()` (a
 * time by the Clock) is within `activeFor`, else every `restingEvery`. It wakes every
 * `probeEvery` either way (a timer, no work), so a runner that becomes active is probed for at
 * most `probeEvery` later.
 */
export const paced = <E, R>(round: Effect.Effect<void, E, R>, timing: LoadTiming, lastActive: () => number): Effect.Effect<never, E, R> =>
  Effect.suspend(() => {
    const activeFor = Duration.toMillis(timing.activeFor)
    const restingEvery = Duration.toMillis(timing.restingEvery)
    let last = Number.NEGATIVE_INFINITY
    const due = Effect.clockWith((clock) => {
      const now = clock.unsafeCurrentTimeMillis()
      if (now - lastActive() > activeFor && now - last < restingEvery) return Effect.void
      last = now
      return round
    })
    return Effect.forever(Effect.zipRight(due, Effect.sleep(timing.probeEvery)))
  })

export class Loads extends Context.Tag("nativegen/cluster/Loads")<Loads, {
  /** This runner's stored address. */
  readonly self: string
  /** This runner's load now (its own scheduler). */
  readonly own: Effect.Effect<RunnerLoad>
  /** The other runners' loads as last heard: fresh answers only. */
  readonly others: Effect.Effect<ReadonlyArray<RunnerLoad>>
  /**
   * Marks request `id`, served for another runner, as running here until the scope ends (its id is
   * in `serving` meanwhile), and counts it as served.
   */
  readonly serving: (kind: "generations" | "decisions", id: string) => Effect.Effect<void, never, Scope.Scope>
}>() {}

/**
 * The runner holding each shard of a group (index 0 is shard 1) as Sharding assigns them: the
 * healthy runners of the group on a hash ring by weight; undefined when none is healthy.
 */
export const assignments = (
  runners: ReadonlyArray<readonly [{ readonly address: RunnerAddress; readonly groups: ReadonlyArray<string>; readonly weight: number }, boolean]>,
  group: string,
  shards: number
): ReadonlyArray<RunnerAddress> | undefined => {
  const ring = HashRing.make<RunnerAddress>()
  for (const [runner, healthy] of runners) {
    if (healthy && runner.groups.includes(group)) HashRing.add(ring, runner.address, { weight: runner.weight })
  }
  return HashRing.getShards(ring, shards)
}

/**
 * The Loads of this runner. `probe(shard)` asks the runner holding `shard` for its load (the work
 * entity's Load message; WorkEntity.ts passes it in, so this module does not depend on it).
 */
export const make = (
  address: RunnerAddress,
  shards: number,
  probe: (shard: number) => Effect.Effect<RunnerLoad, unknown>,
  timing: LoadTiming = defaultTiming,
  sink?: { readonly address: RunnerAddress; readonly directTurns: () => number }
) =>
  Effect.gen(function*() {
    const sharding = yield* Sharding
    const storage = yield* RunnerStorage
    const provider = yield* Provider
    const drain = yield* Drain
    const self = storedAddress(address)
    const shardIds = Array.from({ length: shards }, (_, i) => ShardId.make("default", i + 1))
    const served = { generations: 0, decisions: 0 }
    const serving = new Set<string>()

    const own = Effect.zipWith(provider.readiness, drain.draining, (r, draining): RunnerLoad => ({
      address: self,
      ready: r.state === "ready",
      running: r.scheduler.running,
      queued: r.scheduler.queued,
      slots: r.scheduler.slots,
      // A stopping runner reports none (it is not chosen), from the start of its drain.
      shards: draining ? [] : shardIds.filter((id) => sharding.hasShardId(id)).map((id) => id.id),
      served: { ...served },
      serving: [...serving],
      ...(sink === undefined ? {} : { sink: sink.address, directTurns: sink.directTurns() })
    }))

    const heard = new Map<string, { readonly load: RunnerLoad; readonly at: number }>()
    const staleAfter = Duration.toMillis(timing.staleAfter)

    /** One round: the first shard of each other runner, asked at once. */
    const round = Effect.gen(function*() {
      const assigned = assignments(yield* storage.getRunners, "default", shards) ?? []
      const firstShard = new Map<string, number>()
      assigned.forEach((runner, i) => {
        const at = storedAddress(runner)
        if (at !== self && !firstShard.has(at)) firstShard.set(at, i + 1)
      })
      yield* Effect.forEach(firstShard.values(), (shard) =>
        probe(shard).pipe(
          Effect.timeout(timing.probeTimeout),
          Effect.tap((load) =>
            Effect.sync(() => {
              if (load.address !== self) heard.set(load.address, { load, at: Date.now() })
            })
          ),
          Effect.ignore
        ), { concurrency: "unbounded", discard: true })
    })

    let failures = 0
    let lastActive = Number.NEGATIVE_INFINITY
    const active = Effect.clockWith((clock) => Effect.sync(() => (lastActive = clock.unsafeCurrentTimeMillis())))
    const guarded = round.pipe(
      Effect.tap(() => Effect.sync(() => (failures = 0))),
      Effect.catchAllCause((cause) =>
        // Failures in a row are a warning at the first and every 20th, debug lines between.
        failures++ % 20 === 0
          ? Effect.logWarning(`cluster load: reading the runners failed ${failures} times in a row`, cause)
          : Effect.logDebug("cluster load: reading the runners failed", cause)
      )
    )
    yield* paced(guarded, timing, () => lastActive).pipe(Effect.annotateLogs({ service: "Loads" }), Effect.forkScoped)

    return Loads.of({
      self,
      own,
      others: Effect.zipRight(
        active,
        Effect.sync(() => {
          const now = Date.now()
          return [...heard.values()].filter((h) => now - h.at <= staleAfter).map((h) => h.load)
        })
      ),
      serving: (kind, id) =>
        Effect.acquireRelease(
          Effect.zipRight(
            active,
            Effect.sync(() => {
              served[kind]++
              serving.add(id)
            })
          ),
          () => Effect.sync(() => void serving.delete(id))
        )
    })
  })
