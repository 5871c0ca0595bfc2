/**
 * `Status.sessionsToRunners`: on PostgreSQL a shard lock names a server session, not a runner;
 * each session is named by the runner whose assigned shards it holds most of. Settled (every
 * session holds exactly its runner's assignment, sessions numbered anyhow), every session gets its
 * own runner; a session holding shards of no runner's assignment stays unnamed, and no runner
 * names two sessions.
 */
import { assert, describe, it } from "@effect/vitest"
import * as fc from "effect/FastCheck"
import { liveRunners, sessionsToRunners } from "../../src/cluster/Status.js"

/** Shards 1..n split among runners a, b, c, ... (each shard's runner index), and a pid per runner. */
const cluster = fc.integer({ min: 1, max: 6 }).chain((runners) =>
  fc.record({
    owner: fc.array(fc.nat(runners - 1), { minLength: runners, maxLength: 40 }),
    pids: fc.uniqueArray(fc.integer({ min: 1, max: 100_000 }), { minLength: runners, maxLength: runners })
  }).map(({ owner, pids }) => {
    const names = pids.map((_, i) => `/tmp/r${i}.sock:0`)
    const assigned = new Map<string, Set<string>>()
    owner.forEach((r, i) => assigned.set(names[r]!, (assigned.get(names[r]!) ?? new Set()).add(`default:${i + 1}`)))
    return { names, pids, assigned }
  })
)

describe("cluster status on PostgreSQL: lock sessions named by runner", () => {
  it.prop("settled: each session holding a runner's assignment is named by that runner", [cluster], ([{ names, pids, assigned }]) => {
    const held = new Map<number, ReadonlySet<string>>()
    names.forEach((name, i) => {
      const own = assigned.get(name)
      if (own !== undefined) held.set(pids[i]!, own)
    })
    const named = sessionsToRunners(held, assigned)
    assert.strictEqual(named.size, held.size)
    names.forEach((name, i) => {
      if (assigned.has(name)) assert.strictEqual(named.get(pids[i]!), name)
    })
  })

  it.prop("moving: one runner per session at most, and a session overlapping no assignment stays unnamed", [
    cluster,
    fc.array(fc.tuple(fc.integer({ min: 100_001, max: 100_010 }), fc.integer({ min: 1, max: 60 })))
  ], ([{ assigned }, locks]) => {
    // Sessions holding arbitrary shards (some beyond every assignment).
    const held = new Map<number, Set<string>>()
    for (const [pid, shard] of locks) held.set(pid, (held.get(pid) ?? new Set()).add(`default:${shard}`))
    const named = sessionsToRunners(held, assigned)
    assert.strictEqual(new Set(named.values()).size, named.size, "a runner named two sessions")
    for (const [pid, shards] of held) {
      const overlaps = [...assigned.values()].some((own) => [...shards].some((s) => own.has(s)))
      if (!overlaps) assert.isFalse(named.has(pid), `session ${pid} holds no assigned shard`)
      const runner = named.get(pid)
      if (runner !== undefined) assert.isTrue([...shards].some((s) => assigned.get(runner)!.has(s)))
    }
  })
})

describe("cluster status on PostgreSQL: the runners counted", () => {
  it("a runner whose heartbeat is older than the lock expiry is not counted, though still marked healthy (a SIGKILLed runner's row)", () => {
    const rows = [
      { address: "r1", healthy: true, last_heartbeat: new Date("2026-12-04T10:40:10Z") },
      { address: "r2", healthy: true, last_heartbeat: new Date("2026-12-04T10:40:03Z") },
      { address: "r3", healthy: true, last_heartbeat: new Date("2026-12-04T10:40:09Z") },
      { address: "r4", healthy: false, last_heartbeat: new Date("2026-12-04T10:40:10Z") }
    ]
    assert.deepStrictEqual(liveRunners(rows, 3_000).map((r) => r.address), ["r1", "r3"])
    assert.deepStrictEqual(liveRunners(rows, 35_000).map((r) => r.address), ["r1", "r2", "r3"])
    // As SQLite returns them: text in the storage's time.
    const text = rows.map((r) => ({ ...r, last_heartbeat: r.last_heartbeat.toISOString().slice(0, 19).replace("T", " ") }))
    assert.deepStrictEqual(liveRunners(text, 3_000).map((r) => r.address), ["r1", "r3"])
  })
})
