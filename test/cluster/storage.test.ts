/**
 * The SQLite runner storage with two clients on one file, as two runners have: a write
 * transaction that meets another's waits for it instead of failing, and the client goes on
 * answering afterwards (with @effect/sql-libsql 0.42 alone, the failed BEGIN leaked the client's
 * permit and every later query waited forever: a runner stopped refreshing its shard locks).
 */
import { assert, describe, it } from "@effect/vitest"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Storage from "../../src/cluster/Storage.js"

const client = (file: string) =>
  Effect.map(Layer.build(Layer.fresh(Storage.layerSqlClient({ _tag: "Sqlite", file }))), (context) => Context.get(context, SqlClient.SqlClient))

describe("SQLite runner storage", () => {
  it.live("a write transaction waits for another runner's, and the client keeps answering", () =>
    Effect.gen(function*() {
      const dir = yield* Effect.acquireRelease(
        Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "ngs-"))),
        (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
      )
      const file = Path.join(dir, "cluster.db")
      const a = yield* client(file)
      const b = yield* client(file)
      yield* a`CREATE TABLE t (x INTEGER)`
      // A writes and holds its transaction open until B has tried to begin one.
      const inside = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      const holding = yield* a.withTransaction(
        a`INSERT INTO t VALUES (1)`.pipe(Effect.zipRight(Deferred.succeed(inside, undefined)), Effect.zipRight(Deferred.await(release)))
      ).pipe(Effect.fork)
      yield* Deferred.await(inside)
      const writing = yield* b.withTransaction(b`INSERT INTO t VALUES (2)`).pipe(Effect.fork)
      // B's BEGIN meets A's write lock for a while (the other runner holding it).
      yield* Effect.sleep("200 millis")
      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(holding)
      yield* Fiber.join(writing).pipe(Effect.timeout("10 seconds"))
      const rows = yield* b<{ n: number }>`SELECT count(*) AS n FROM t`.pipe(Effect.timeout("5 seconds"))
      assert.strictEqual(rows[0]?.n, 2)
    }).pipe(Effect.scoped), 30_000)
})
