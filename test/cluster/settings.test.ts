/**
 * `serve --cluster`'s flags as the runner reads them (addresses, storage, detection, shards, hold), the
 * detection time's cluster timing, and `cluster status`'s shard ranges. No runner is started.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import { ranges } from "../../src/cluster/Command.js"
import * as Health from "../../src/cluster/Health.js"
import { settingsOf } from "../../src/cluster/ServeOptions.js"
import * as Storage from "../../src/cluster/Storage.js"

const flags = (cluster: string | undefined, more: Partial<Record<"storage" | "detection" | "shards" | "hold" | "sinkPort", string | number>> = {}) => ({
  cluster: Option.fromNullable(cluster),
  clusterStorage: Option.fromNullable(more.storage as string | undefined),
  clusterDetection: Option.fromNullable(more.detection as number | undefined),
  clusterShards: Option.fromNullable(more.shards as number | undefined),
  clusterHold: Option.fromNullable(more.hold as number | undefined),
  clusterSinkPort: Option.fromNullable(more.sinkPort as number | undefined)
})

describe("cluster settings", () => {
  it.effect("a socket path is a Unix runner address (port 0); HOST:PORT is TCP; no --cluster is no runner", () =>
    Effect.gen(function*() {
      const unix = yield* settingsOf(flags("/run/ng/r1.sock", { storage: "/tmp/c.db" }))
      assert.deepStrictEqual([unix?.address.host, unix?.address.port], ["/run/ng/r1.sock", 0])
      assert.deepStrictEqual(unix?.storage, { _tag: "Sqlite", file: "/tmp/c.db" })
      assert.strictEqual(Duration.toSeconds(Duration.decode(unix!.detection)), 3)
      const tcp = yield* settingsOf(flags("10.0.0.1:34431", { detection: 5, shards: 12 }))
      assert.deepStrictEqual([tcp?.address.host, tcp?.address.port, tcp?.shards], ["10.0.0.1", 34431, 12])
      assert.strictEqual(Duration.toSeconds(Duration.decode(tcp!.detection)), 5)
      // No hold unless asked for: a remote stream's chunks are never held by default.
      assert.strictEqual(Duration.toMillis(Duration.decode(unix!.hold ?? 0)), 0)
      const held = yield* settingsOf(flags("/run/ng/r1.sock", { hold: 5 }))
      assert.strictEqual(Duration.toMillis(Duration.decode(held!.hold ?? 0)), 5)
      assert.isUndefined(yield* settingsOf(flags(undefined)))
      // A TCP runner's sink: a free port unless fixed (for a firewall).
      assert.strictEqual(tcp?.sinkPort, 0)
      assert.strictEqual((yield* settingsOf(flags("10.0.0.1:34431", { sinkPort: 34432 })))?.sinkPort, 34432)
    }))

  it.effect("refusals name the flag and the value", () =>
    Effect.gen(function*() {
      const reasons = yield* Effect.forEach(
        [
          flags("127.0.0.1:0"),
          flags("http://x:1"),
          flags("/r.sock", { storage: "mysql://x" }),
          flags("/r.sock", { detection: 0 }),
          flags("/r.sock", { shards: 0 }),
          flags("/r.sock", { hold: 101 }),
          flags("/r.sock", { sinkPort: 34432 }),
          flags("10.0.0.1:34431", { sinkPort: 34431 }),
          flags("10.0.0.1:34431", { sinkPort: 70000 })
        ],
        (f) => Effect.map(Effect.flip(settingsOf(f)), (e) => e.reason)
      )
      assert.include(reasons[0], "not 0")
      assert.include(reasons[1], "--cluster:")
      assert.include(reasons[2], "--cluster-storage")
      assert.include(reasons[3], "--cluster-detection 0")
      assert.include(reasons[4], "--cluster-shards 0")
      assert.include(reasons[5], "--cluster-hold 101: from 0 to 100")
      assert.include(reasons[6], "--cluster-sink-port 34432: only for a TCP --cluster address")
      assert.include(reasons[7], "--cluster-sink-port 34431: from 1 to 65535, not the --cluster port")
      assert.include(reasons[8], "--cluster-sink-port 70000")
    }))

  it("storage: file paths and file: URLs are SQLite, postgres URLs are PostgreSQL with the password hidden in logs", () => {
    assert.deepStrictEqual(Storage.parseStorage("file:/a/b.db"), { _tag: "Sqlite", file: "/a/b.db" })
    const pg = Storage.parseStorage("postgres://ng:secret@db:5432/ng")
    assert.strictEqual(pg._tag, "Postgres")
    if (pg._tag === "Postgres") {
      assert.strictEqual(Redacted.value(pg.url), "postgres://ng:secret@db:5432/ng")
      assert.notInclude(Storage.describeStorage(pg), "secret")
    }
    assert.strictEqual(Storage.parseStorage("dir/")._tag, "InvalidStorage")
  })

  it("the detection time drives pings, lock expiry and refreshes (a third of it each), at least 1 s", () => {
    const three = Health.timing("3 seconds")
    assert.strictEqual(Duration.toMillis(three.pingTimeout), 1000)
    assert.strictEqual(Duration.toMillis(Duration.decode(three.config.shardLockExpiration)), 3000)
    assert.strictEqual(Duration.toMillis(Duration.decode(three.config.runnerHealthCheckInterval)), 1000)
    assert.strictEqual(Duration.toMillis(Health.timing("100 millis").detection), 1000)
  })

  it("shard numbers print as ranges", () => {
    assert.strictEqual(ranges([7, 1, 2, 3, 9, 10]), "1-3, 7, 9-10")
    assert.strictEqual(ranges([]), "")
  })
})
