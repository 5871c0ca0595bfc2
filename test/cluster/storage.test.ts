/**
 * The runner storage as several runners use it, on both backends: SQLite (one file, as runners on
 * one host share it) and PostgreSQL (the server in NATIVEGEN_TEST_POSTGRES, a database of its own
 * per test; skipped with the reason in the test's name where there is none). Each "runner" here
 * is a storage layer of its own (its own SQL client and connections), as a runner process has.
 *
 * - A write transaction that meets another's waits for it instead of failing, and the client
 *   goes on answering afterwards (with @effect/sql-libsql 0.42 alone, the failed BEGIN leaked the
 *   client's permit and every later query waited forever: a runner stopped refreshing its locks).
 * - Runners starting together all create the tables (a race on PostgreSQL's catalog) and work.
 * - A shard is held by one runner at a time; released, another takes it.
 * - PostgreSQL: a runner whose connection dies loses its shard locks at once (the server drops a
 *   dead session's advisory locks) and learns so at its next refresh.
 */
import * as Runner from "@effect/cluster/Runner"
import { RunnerAddress } from "@effect/cluster/RunnerAddress"
import * as RunnerStorage from "@effect/cluster/RunnerStorage"
import * as ShardId from "@effect/cluster/ShardId"
import * as ShardingConfig from "@effect/cluster/ShardingConfig"
import { assert, describe, it } from "@effect/vitest"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import * as Scope from "effect/Scope"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as V8 from "node:v8"
import * as Vm from "node:vm"
import * as Placement from "../../src/cluster/Placement.js"
import * as ClusterRunner from "../../src/cluster/Runner.js"
import * as SharedKeys from "../../src/cluster/SharedKeys.js"
import * as Status from "../../src/cluster/Status.js"
import * as Storage from "../../src/cluster/Storage.js"
import { freePort } from "./free-port.js"
import { freshDatabase, named, unavailable } from "./postgres.js"

interface Backend {
  readonly name: string
  /** Why it cannot be tested here. */
  readonly skipped: string | undefined
  /** A storage of its own for the scope (a new file, a new database). */
  readonly fresh: Effect.Effect<Storage.StorageSpec, never, Scope.Scope>
}

const sqlite: Backend = {
  name: "SQLite",
  skipped: undefined,
  fresh: Effect.map(
    Effect.acquireRelease(
      Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "ngs-"))),
      (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
    ),
    (dir) => ({ _tag: "Sqlite", file: Path.join(dir, "cluster.db") })
  )
}

const postgres: Backend = {
  name: "PostgreSQL",
  skipped: unavailable,
  fresh: Effect.map(freshDatabase, (url) => ({ _tag: "Postgres", url: Redacted.make(url) }))
}

const SHARDS = 4
const config = ShardingConfig.layer({ shardsPerGroup: SHARDS, shardLockExpiration: "5 seconds" })

/** The SQL client a runner would have on `spec`. */
const client = (spec: Storage.StorageSpec) =>
  Effect.map(Layer.build(Layer.fresh(Storage.layerSqlClient(spec))), (context) => Context.get(context, SqlClient.SqlClient))

/** The runner storage a runner would have on `spec` (with its own SQL client). */
const runnerStorage = (spec: Storage.StorageSpec) =>
  Effect.map(
    Layer.build(Layer.fresh(Storage.layer(spec).pipe(Layer.provide(config)))),
    (context) => ({ storage: Context.get(context, RunnerStorage.RunnerStorage), sql: Context.get(context, SqlClient.SqlClient), context })
  )

const addressOf = (name: string) => RunnerAddress.make({ host: name, port: 1 })
const shards = Array.from({ length: SHARDS }, (_, i) => ShardId.make("default", i + 1))
const names = (ids: ReadonlyArray<ShardId.ShardId>) => ids.map((s) => s.toString()).sort()

for (const backend of [sqlite, postgres]) {
  const title = `${backend.name} runner storage`
  describe.skipIf(backend.skipped !== undefined)(backend.skipped === undefined ? title : `${title} [skipped: ${backend.skipped}]`, () => {
    it.live("a write transaction waits for another runner's, and the client keeps answering", () =>
      Effect.gen(function*() {
        const spec = yield* backend.fresh
        const a = yield* client(spec)
        const b = yield* client(spec)
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
        const rows = yield* b<{ n: number | string }>`SELECT count(*) AS n FROM t`.pipe(Effect.timeout("5 seconds"))
        assert.strictEqual(Number(rows[0]?.n), 2)
      }).pipe(Effect.scoped), 30_000)

    it.live("runners starting together all create the tables, register and see each other (heartbeats shown alike)", () =>
      Effect.gen(function*() {
        const spec = yield* backend.fresh
        const runners = yield* Effect.forEach(["r1", "r2", "r3", "r4"], (name) =>
          Effect.gen(function*() {
            const { context, storage } = yield* runnerStorage(spec)
            yield* Effect.all([Placement.createTable, SharedKeys.createTable]).pipe(Effect.provide(context))
            yield* storage.register(Runner.make({ address: addressOf(name), groups: ["default"], weight: 1 }), true)
            return storage
          }), { concurrency: "unbounded" })
        const snapshot = yield* Status.snapshot.pipe(Effect.provideService(SqlClient.SqlClient, yield* client(spec)))
        for (const runner of snapshot.runners) assert.match(runner.lastHeartbeat, /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/)
        const seen = yield* runners[0]!.getRunners
        assert.deepStrictEqual(seen.map(([r, healthy]) => `${r.address.host} ${healthy}`).sort(), [
          "r1 true",
          "r2 true",
          "r3 true",
          "r4 true"
        ])
      }).pipe(Effect.scoped), 60_000)

    it.live("a shard is held by one runner at a time; released, another runner takes it", () =>
      Effect.gen(function*() {
        const spec = yield* backend.fresh
        const a = yield* runnerStorage(spec)
        const b = yield* runnerStorage(spec)
        assert.deepStrictEqual(names(yield* a.storage.acquire(addressOf("a"), shards)), names(shards))
        assert.deepStrictEqual(yield* b.storage.acquire(addressOf("b"), shards), [])
        assert.deepStrictEqual(names(yield* a.storage.refresh(addressOf("a"), shards)), names(shards))
        yield* a.storage.release(addressOf("a"), shards[0]!)
        assert.deepStrictEqual(names(yield* b.storage.acquire(addressOf("b"), shards)), names([shards[0]!]))
        assert.deepStrictEqual(names(yield* a.storage.refresh(addressOf("a"), shards)), names(shards.slice(1)))
      }).pipe(Effect.scoped), 60_000)
  })
}

describe.skipIf(unavailable !== undefined)(named("PostgreSQL runner storage, a runner's connection lost"), () => {
  it.live("its shard locks go at once to another runner, and it learns so at its next refresh", () =>
    Effect.gen(function*() {
      const spec = yield* postgres.fresh
      const a = yield* runnerStorage(spec)
      const b = yield* runnerStorage(spec)
      assert.deepStrictEqual(names(yield* a.storage.acquire(addressOf("a"), shards)), names(shards))
      // The server ends the session holding the advisory locks (as when A's host or process dies).
      const ended = yield* b.sql<{ ended: boolean }>`
        WITH holders AS MATERIALIZED (SELECT DISTINCT pid FROM pg_locks WHERE locktype = 'advisory' AND granted)
        SELECT pg_terminate_backend(pid) AS ended FROM holders`
      assert.deepStrictEqual(ended.map((row) => row.ended), [true])
      const taken = yield* b.storage.acquire(addressOf("b"), shards).pipe(
        Effect.filterOrFail((got) => got.length === SHARDS),
        Effect.retry(Schedule.spaced("50 millis").pipe(Schedule.upTo("5 seconds")))
      )
      assert.deepStrictEqual(names(taken), names(shards))
      // A's refresh (on a new connection) finds none of its locks held.
      const kept = yield* a.storage.refresh(addressOf("a"), shards).pipe(Effect.retry(Schedule.spaced("100 millis").pipe(Schedule.upTo("5 seconds"))))
      assert.deepStrictEqual(kept, [])
    }).pipe(Effect.scoped), 60_000)
})

/** This process's open file descriptors on `file` and its companions (-wal, -shm, -journal). */
const openOn = (file: string) =>
  Fs.readdirSync("/proc/self/fd").filter((fd) => {
    try {
      return Fs.readlinkSync(`/proc/self/fd/${fd}`).startsWith(file)
    } catch {
      return false
    }
  }).length

/** A full garbage collection (V8's gc, exposed at run time). */
const collectGarbage = () => {
  V8.setFlagsFromString("--expose-gc")
  const gc: unknown = Vm.runInNewContext("gc")
  if (typeof gc === "function") gc()
}

/**
 * Another process that takes the SQLite write lock on `file` (a write transaction left open), as a
 * runner does mid-write; scoped: SIGKILLed at the latest when the scope closes.
 */
const lockHolder = (file: string) =>
  Effect.acquireRelease(
    Effect.async<ChildProcess.ChildProcess, Error>((resume) => {
      const script = [
        "import { createClient } from '@libsql/client'",
        `const c = createClient({ url: ${JSON.stringify(`file:${file}`)} })`,
        "await c.execute('BEGIN IMMEDIATE')",
        `await c.execute("UPDATE ${Storage.tablePrefix}_runners SET healthy = healthy")`,
        // Kept reachable: a client nothing refers to is collected at the child's first full GC (an idle
        // process has one some seconds after start), closing its connection and so ending the transaction.
        "globalThis.holder = c",
        "console.log('holding')",
        "setInterval(() => {}, 60_000)"
      ].join("\n")
      const child = ChildProcess.spawn(process.execPath, ["--input-type=module", "-e", script], { stdio: ["ignore", "pipe", "inherit"] })
      child.stdout.on("data", (data: Buffer) => {
        if (data.toString().includes("holding")) resume(Effect.succeed(child))
      })
      child.on("exit", (code) => resume(Effect.fail(new Error(`the lock holder exited (${code}) before it held the lock`))))
    }),
    (child) => killed(child)
  )

/** SIGKILLs `child` and waits until it is gone. */
const killed = (child: ChildProcess.ChildProcess) =>
  Effect.async<void>((resume) => {
    if (child.exitCode !== null || child.signalCode !== null) return resume(Effect.void)
    child.once("exit", () => resume(Effect.void))
    child.kill("SIGKILL")
  })

describe.skipIf(!Fs.existsSync("/proc/self/fd"))("SQLite runner storage connections", () => {
  it.live("a process SIGKILLed while it holds the write lock: the kernel frees it, and the runners' next writes commit", () =>
    Effect.gen(function*() {
      const spec = yield* sqlite.fresh
      const file = spec._tag === "Sqlite" ? spec.file : assert.fail("sqlite")
      const a = yield* runnerStorage(spec)
      const b = yield* runnerStorage(spec)
      yield* a.storage.register(Runner.make({ address: addressOf("a"), groups: ["default"], weight: 1 }), true)
      assert.deepStrictEqual(names(yield* a.storage.acquire(addressOf("a"), shards)), names(shards))
      const holder = yield* lockHolder(file)
      // While it holds the lock, A's refresh (heartbeat and locks) fails after its retries: SQLITE_BUSY.
      const refused = yield* Effect.flip(a.storage.refresh(addressOf("a"), shards))
      assert.isTrue(Storage.isBusy(refused.cause), `refresh while the lock is held: ${refused.message}`)
      yield* killed(holder)
      // A's next refresh commits (B reads it), and B can write after it.
      assert.deepStrictEqual(names(yield* a.storage.refresh(addressOf("a"), shards)), names(shards))
      assert.deepStrictEqual((yield* b.storage.getRunners).map(([r]) => r.address.host), ["a"])
      assert.deepStrictEqual(yield* b.storage.acquire(addressOf("b"), shards).pipe(Effect.timeout("5 seconds")), [])
      yield* b.storage.register(Runner.make({ address: addressOf("b"), groups: ["default"], weight: 1 }), true).pipe(Effect.timeout("5 seconds"))
    }).pipe(Effect.scoped), 30_000)

  it.live("a write that met another runner's write lock leaves its connection sound: the next write commits and releases the lock", () =>
    Effect.gen(function*() {
      const spec = yield* sqlite.fresh
      const a = yield* client(spec)
      const b = yield* client(spec)
      yield* a`CREATE TABLE t (k INTEGER PRIMARY KEY, v INTEGER)`
      yield* a`INSERT INTO t VALUES (1, 0)`
      // B holds the write lock while A writes outside a transaction (as a heartbeat is written).
      const inside = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      const holding = yield* b.withTransaction(
        b`UPDATE t SET v = v + 1 WHERE k = 1`.pipe(Effect.zipRight(Deferred.succeed(inside, undefined)), Effect.zipRight(Deferred.await(release)))
      ).pipe(Effect.fork)
      yield* Deferred.await(inside)
      const busy = yield* Effect.flip(a`UPDATE t SET v = v + 10 WHERE k = 1`)
      assert.isTrue(Storage.isBusy(busy.cause), `A's write met B's lock: ${busy.message}`)
      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(holding)
      // A's next write is committed at once: another runner sees it and can write after it.
      yield* a`UPDATE t SET v = v + 100 WHERE k = 1`
      const seen = yield* b<{ v: number }>`SELECT v FROM t WHERE k = 1`
      assert.strictEqual(Number(seen[0]?.v), 101, "B sees A's committed write")
      yield* b.withTransaction(b`UPDATE t SET v = v + 1000 WHERE k = 1`).pipe(Effect.timeout("5 seconds"))
      const after = yield* a<{ v: number }>`SELECT v FROM t WHERE k = 1`
      assert.strictEqual(Number(after[0]?.v), 1101)
    }).pipe(Effect.scoped), 30_000)

  it.live("a write transaction that cannot begin while another process holds the lock fails with SQLITE_BUSY, and the client keeps answering", () =>
    Effect.gen(function*() {
      const spec = yield* sqlite.fresh
      const file = spec._tag === "Sqlite" ? spec.file : assert.fail("sqlite")
      const { sql } = yield* runnerStorage(spec)
      yield* sql`CREATE TABLE t (x INTEGER)`
      const holder = yield* lockHolder(file)
      const started = performance.now()
      const refused = yield* Effect.flip(sql.withTransaction(sql`INSERT INTO t VALUES (1)`)).pipe(Effect.timeout("20 seconds"))
      assert.isTrue(Storage.isBusy(refused), `the transaction's failure: ${refused.message}`)
      assert.isAtLeast(performance.now() - started, Storage.writerWait)
      yield* killed(holder)
      // The client's transaction permit was given back: the next transaction runs.
      yield* sql.withTransaction(sql`INSERT INTO t VALUES (2)`).pipe(Effect.timeout("5 seconds"))
      const rows = yield* sql<{ x: number }>`SELECT x FROM t`
      assert.deepStrictEqual(rows.map((r) => Number(r.x)), [2])
    }).pipe(Effect.scoped), 30_000)

  it.live("every connection commits without waiting for the disk (synchronous = NORMAL), also one replaced after a failure and a transaction's", () =>
    Effect.gen(function*() {
      const spec = yield* sqlite.fresh
      const sql = yield* client(spec)
      const synchronous = Effect.map(sql<{ synchronous: number }>`PRAGMA synchronous`, (rows) => Number(rows[0]?.synchronous))
      // SQLite's own default is FULL (2); NORMAL is 1.
      assert.strictEqual(yield* synchronous, 1, "the shared connection")
      assert.strictEqual(yield* sql.withTransaction(synchronous), 1, "the transactions' connection")
      // A failed statement closes the shared connection; its replacement is set up the same.
      yield* Effect.flip(sql`SELECT * FROM no_such_table`)
      assert.strictEqual(yield* synchronous, 1, "the connection after a failure")
    }).pipe(Effect.scoped), 30_000)

  it.live("write transactions close their connections, and closing the storage closes the rest: no file left open", () =>
    Effect.gen(function*() {
      const spec = yield* sqlite.fresh
      const file = spec._tag === "Sqlite" ? spec.file : assert.fail("sqlite")
      const scope = yield* Scope.make()
      const sql = yield* client(spec).pipe(Scope.extend(scope))
      yield* sql`CREATE TABLE t (x INTEGER)`
      const idle = openOn(file)
      assert.isAbove(idle, 0)
      for (let i = 0; i < 10; i++) yield* sql.withTransaction(sql`INSERT INTO t VALUES (${i})`)
      // A failed transaction (rolled back) too.
      yield* sql.withTransaction(Effect.zipRight(sql`INSERT INTO t VALUES (99)`, Effect.fail("undo"))).pipe(Effect.flip)
      // The main connection and the one for transactions (its database file and WAL).
      assert.isAtMost(openOn(file), idle + 2, "descriptors after 11 transactions")
      const rows = yield* sql<{ n: number }>`SELECT count(*) AS n FROM t`
      assert.strictEqual(rows[0]?.n, 10)
      yield* Scope.close(scope, Exit.void)
      // libsql releases a closed connection's files when its statements are collected (it has no finalize).
      collectGarbage()
      yield* Effect.sleep("50 millis")
      collectGarbage()
      assert.strictEqual(openOn(file), 0, "descriptors after the storage's scope closed")
    }).pipe(Effect.scoped), 30_000)
})

describe("runner storage errors", () => {
  it.live("a PostgreSQL server that does not answer is named with the driver's reason, not only \"Failed to execute statement\"", () =>
    Effect.gen(function*() {
      const port = yield* freePort
      const spec: Storage.StorageSpec = { _tag: "Postgres", url: Redacted.make(`postgres://nobody:secret@127.0.0.1:${port}/none`) }
      const error = yield* Effect.flip(runnerStorage(spec))
      assert.include(error.message, "ECONNREFUSED")
    }).pipe(Effect.scoped), 30_000)
})

/**
 * Another process holding the SQLite write lock (a write transaction left open) until told: `release`
 * commits it (a message on its stdin) and returns once it has. The file is switched to WAL first,
 * as a runner leaves it. Scoped: SIGKILLed at the latest when the scope closes.
 */
const releasableLockHolder = (file: string) =>
  Effect.gen(function*() {
    const child = yield* Effect.acquireRelease(
      Effect.async<ChildProcess.ChildProcess, Error>((resume) => {
        const script = [
          "import { createClient } from '@libsql/client'",
          `const c = createClient({ url: ${JSON.stringify(`file:${file}`)} })`,
          "await c.execute('PRAGMA journal_mode = WAL')",
          "await c.execute('CREATE TABLE IF NOT EXISTS lock_holder (x INTEGER)')",
          "await c.execute('BEGIN IMMEDIATE')",
          "await c.execute('INSERT INTO lock_holder VALUES (1)')",
          "globalThis.holder = c", // as in lockHolder: reachable, or the first full GC ends the transaction
          "console.log('holding')",
          "process.stdin.once('data', async () => { await c.execute('COMMIT'); console.log('released') })"
        ].join("\n")
        const child = ChildProcess.spawn(process.execPath, ["--input-type=module", "-e", script], { stdio: ["pipe", "pipe", "inherit"] })
        child.stdout.on("data", (data: Buffer) => {
          if (data.toString().includes("holding")) resume(Effect.succeed(child))
        })
        child.on("exit", (code) => resume(Effect.fail(new Error(`the lock holder exited (${code}) before it held the lock`))))
      }),
      (child) => killed(child)
    )
    let released = false
    const release = Effect.async<void>((resume) => {
      if (released) return resume(Effect.void)
      child.stdout!.on("data", (data: Buffer) => {
        if (data.toString().includes("released")) {
          released = true
          resume(Effect.void)
        }
      })
      child.stdin!.write("release\n")
    })
    return { release, isReleased: () => released }
  })

describe("SQLite runner storage: a runner starting while another process holds the write lock", () => {
  const runnerAt = (dir: string, spec: Storage.StorageSpec, name: string) => {
    const address = RunnerAddress.make({ host: Path.join(dir, `${name}.sock`), port: 0 })
    const sharding = ClusterRunner.layerSharding({ address, storage: spec, detection: "3 seconds", shards: SHARDS })
    // Every statement a runner runs at start: the storage's, Sharding's, and the tables of Runner.layer.
    return { address, layer: Layer.merge(Placement.layer(address), SharedKeys.layer).pipe(Layer.provideMerge(sharding)) }
  }

  it.live("a runner restarting on a storage others write to starts while the lock is held, then registers and takes shards once it is released", () =>
    Effect.gen(function*() {
      const spec = yield* sqlite.fresh
      const file = spec._tag === "Sqlite" ? spec.file : assert.fail("sqlite")
      const dir = Path.dirname(file)
      // A first run left the tables (as after any runner's start).
      yield* Effect.scoped(Layer.build(runnerAt(dir, spec, "before").layer))
      const holder = yield* releasableLockHolder(file)
      const runner = runnerAt(dir, spec, "r1")
      const started = performance.now()
      // Before the fix its placements table was created in a write transaction: BEGIN IMMEDIATE met the lock and
      // the runner gave up after 15 s of SQLITE_BUSY (and exited).
      yield* Layer.build(runner.layer).pipe(Effect.timeout("12 seconds"))
      assert.isFalse(holder.isReleased(), "the runner started while the other process held the lock")
      const startedMillis = performance.now() - started
      yield* holder.release
      // Registered and holding shards once the lock is free (read by another client).
      const other = yield* client(spec)
      const stored = `${runner.address.host}:0`
      const locked = yield* other<{ shard_id: string; address: string }>`SELECT shard_id, address FROM ${other(`${Storage.tablePrefix}_locks`)}`.pipe(
        Effect.filterOrFail((rows) => rows.filter((r) => r.address === stored).length === SHARDS, () => "not all shards locked yet"),
        Effect.retry(Schedule.spaced("200 millis").pipe(Schedule.upTo("20 seconds")))
      )
      assert.strictEqual(locked.length, SHARDS)
      const runners = yield* other<{ address: string }>`SELECT address FROM ${other(`${Storage.tablePrefix}_runners`)}`
      assert.include(runners.map((r) => r.address), stored)
      yield* Effect.logInfo(`started in ${startedMillis.toFixed(0)} ms while the lock was held`)
    }).pipe(Effect.scoped), 60_000)

  it.live("a runner starting on a new storage file waits for the lock, and starts once it is released", () =>
    Effect.gen(function*() {
      const spec = yield* sqlite.fresh
      const file = spec._tag === "Sqlite" ? spec.file : assert.fail("sqlite")
      const holder = yield* releasableLockHolder(file)
      const runner = runnerAt(Path.dirname(file), spec, "r1")
      const starting = yield* Layer.build(runner.layer).pipe(Effect.fork)
      // Held for a while (its tables cannot be created meanwhile), then released.
      yield* Effect.sleep("3 seconds")
      assert.isNull(starting.unsafePoll(), "the runner could not start while its tables could not be created")
      yield* holder.release
      yield* Fiber.join(starting).pipe(Effect.timeout("20 seconds"))
    }).pipe(Effect.scoped), 60_000)

  it.live("a lock held past the start's wait fails the start with StorageBusy, naming the storage file and the wait", () =>
    Effect.gen(function*() {
      const spec = yield* sqlite.fresh
      const file = spec._tag === "Sqlite" ? spec.file : assert.fail("sqlite")
      yield* releasableLockHolder(file)
      const error = yield* Effect.flip(Layer.build(Layer.fresh(Storage.layer(spec, { startWait: "1500 millis" }).pipe(Layer.provide(config)))))
      assert.strictEqual(error._tag, "StorageBusy", error.message)
      if (error._tag !== "StorageBusy") return
      assert.include(error.message, file)
      assert.include(error.message, "SQLITE_BUSY")
      assert.isAtLeast(error.waitedMillis, 1500)
      assert.isTrue(Storage.isBusy(error.cause))
    }).pipe(Effect.scoped), 30_000)
})
