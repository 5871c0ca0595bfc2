/**
 * Waiting until a cluster's shards settle, for the cluster tests: a read of who holds the shards
 * that must succeed (retried every 250 ms for up to 60 s) and then give the same answer 1.5 s
 * later (a runner that has not yet seen the last one join may still hold shards it is about to
 * release); the whole tried up to 10 times. The reads differ by storage: the lock rows through
 * the status view (SQLite, `shardLocks`), or any read of the test's own (PostgreSQL's advisory
 * locks in pg_locks). test/cluster/kill-support.ts keeps its own (another helper's file).
 */
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import * as Status from "../../src/cluster/Status.js"

/** `read`'s value once it succeeds and gives the same `key` twice, 1.5 s apart. */
export const stable = <A, E, R>(read: Effect.Effect<A, E, R>, key: (a: A) => string) =>
  Effect.gen(function*() {
    const first = yield* read.pipe(Effect.retry(Schedule.spaced("250 millis").pipe(Schedule.upTo("60 seconds"))))
    yield* Effect.sleep("1500 millis")
    const second = yield* read
    return key(first) === key(second) ? second : yield* Effect.fail("the shard locks moved")
  }).pipe(Effect.retry({ times: 10 }), Effect.orDie)

/**
 * The status view once its lock rows show all `shards` held by exactly the runners at `runners`
 * (stored addresses), the same in two reads.
 */
export const shardLocks = (runners: ReadonlyArray<string>, shards: number) => {
  const expected = new Set(runners)
  const read = Effect.flatMap(Status.snapshot, (s) => {
    const owners = new Set(s.shards?.values() ?? [])
    return s.shards?.size === shards && owners.size === expected.size && [...owners].every((o) => expected.has(o))
      ? Effect.succeed(s)
      : Effect.fail(`not settled: ${JSON.stringify([...(s.shards ?? [])])}`)
  })
  return stable(read, (s) => JSON.stringify([...(s.shards ?? [])].sort()))
}
