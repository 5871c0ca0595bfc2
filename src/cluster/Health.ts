/**
 * How fast a dead runner is noticed. @effect/cluster's ping health check waits 10 s per ping and
 * tries six times (about a minute); here one detection time drives it all: a runner is pinged
 * every third of it, a ping that takes longer than a third of it counts as lost, two lost pings
 * in a row make the runner unhealthy, and shard locks expire after it.
 *
 * Two paths free a dead runner's shards, whichever comes first: the health check (a cluster
 * singleton, on whichever runner holds its shard) marks it unhealthy; or its heartbeat, written
 * with every shard-lock refresh, goes stale: SqlRunnerStorage lists only runners whose heartbeat is
 * younger than the lock expiry, so every runner drops it from its ring at its next assignment
 * refresh, when its locks have expired too. The second path also covers the runner that held the
 * health check itself.
 */
import * as RunnerHealth from "@effect/cluster/RunnerHealth"
import * as Runners from "@effect/cluster/Runners"
import type * as ShardingConfig from "@effect/cluster/ShardingConfig"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"

/** The cluster's timing for a detection time (at least 1 s: shard locks expire in whole seconds on SQLite). */
export const timing = (detection: Duration.DurationInput) => {
  const total = Duration.max(Duration.decode(detection), Duration.seconds(1))
  const third = Duration.unsafeDivide(total, 3)
  return {
    detection: total,
    pingTimeout: third,
    config: {
      runnerHealthCheckInterval: third,
      shardLockRefreshInterval: third,
      shardLockExpiration: total,
      refreshAssignmentsInterval: third
    } satisfies Partial<ShardingConfig.ShardingConfig["Type"]>
  }
}

/** Pings a runner once, and once more if the first is lost; alive when either answers in time. */
export const make = (pingTimeout: Duration.DurationInput) =>
  Effect.map(Runners.Runners, (runners) =>
    RunnerHealth.RunnerHealth.of({
      isAlive: (address) =>
        runners.ping(address).pipe(
          Effect.timeout(pingTimeout),
          Effect.retry({ times: 1 }),
          Effect.isSuccess
        )
    }))

export const layer = (pingTimeout: Duration.DurationInput): Layer.Layer<RunnerHealth.RunnerHealth, never, Runners.Runners> =>
  Layer.effect(RunnerHealth.RunnerHealth, make(pingTimeout))
