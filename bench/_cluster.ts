/**
 * What the cluster benchmarks share: `nativegen serve` processes (clustered or plain) in homes of
 * their own, the wait for a settled shard map, the CPU each process used (from /proc), medians and
 * ranges, and the JSON result files in bench/results/.
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClientTag from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import * as Crypto from "node:crypto"
import type { Sharding } from "@effect/cluster/Sharding"
import type * as SqlClient from "@effect/sql/SqlClient"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { ensureModel, type ModelName, modelSpecs, projectRoot } from "../fixtures/models.js"
import * as Status from "../src/cluster/Status.js"
import type { StorageSpec } from "../src/cluster/StorageSpec.js"
import { prepareStore, storeRoot } from "./peer/Nativegen.js"

/**
 * BENCH_CLUSTER_POSTGRES: a PostgreSQL server URL (`.ci/postgres start DIR` prints one) for the
 * runner storage; without it, SQLite files.
 */
const postgres = process.env.BENCH_CLUSTER_POSTGRES

/**
 * The runner storage of one benchmark cluster: a database of its own on BENCH_CLUSTER_POSTGRES's
 * server (dropped with the scope), or an SQLite file in `dir`. `arg` is what `--cluster-storage` takes.
 */
export const clusterStorage = (dir: string, name: string): Effect.Effect<{ readonly arg: string; readonly spec: StorageSpec }, never, Scope.Scope> =>
  Effect.gen(function*() {
    if (postgres === undefined) {
      const file = Path.join(dir, `${name}.db`)
      return { arg: file, spec: { _tag: "Sqlite", file } as const }
    }
    const database = `ng_bench_${name}_${Crypto.randomBytes(4).toString("hex")}`
    const admin = PgClient.layer({ url: Redacted.make(postgres), maxConnections: 1 })
    const run = (statement: string) =>
      Effect.flatMap(SqlClientTag.SqlClient, (sql) => sql.unsafe(statement)).pipe(Effect.provide(admin), Effect.scoped, Effect.orDie)
    yield* Effect.acquireRelease(run(`CREATE DATABASE ${database}`), () => run(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`))
    const url = new URL(postgres)
    url.pathname = `/${database}`
    return { arg: url.toString(), spec: { _tag: "Postgres", url: Redacted.make(url.toString()) } as const }
  })

/** Which runner storage the benchmarks use, for their output. */
export const storageKind = postgres === undefined ? "sqlite" : "postgres"

export interface Served {
  readonly name: string
  /** The server's public RPC socket. */
  readonly socket: string
  /** The server's pid (the leader of its process group; its engine children are its descendants). */
  readonly pid: number
  /** Its address as the runner storage records it (clustered servers only). */
  readonly stored: string | undefined
}

export interface ClusterOf {
  /** Runner address: `HOST:PORT`, or a Unix socket path. */
  readonly address: string
  /** The runner storage, as `--cluster-storage` takes it. */
  readonly storage: string
  readonly shards: number
}

/**
 * The environment that makes a server in `dir/name` serve `model` (a fixture name) instead of
 * the packaged seed: a store in its home with the model active, signed by a key its home trusts.
 */
const isModelName = (name: string): name is ModelName => Object.hasOwn(modelSpecs, name)

export const withModel = (dir: string, name: string, model: string) =>
  Effect.gen(function*() {
    if (!isModelName(model)) return yield* Effect.dieMessage(`unknown model ${model}; known: ${Object.keys(modelSpecs).join(", ")}`)
    const home = Path.join(dir, name)
    const env = { XDG_CONFIG_HOME: Path.join(home, ".config"), XDG_DATA_HOME: Path.join(home, "data") }
    yield* prepareStore({ dir: home, env }, { modelPath: ensureModel(model), modelName: model })
    return { XDG_CONFIG_HOME: env.XDG_CONFIG_HOME, NATIVEGEN_STORE_ROOT: storeRoot({ dir: home, env }) }
  })

/**
 * `nativegen serve` (with `--cluster` settings when `cluster` is given) in its own home and process
 * group, until the scope closes; `threads` engine threads, small contexts.
 */
export const serve = (dir: string, name: string, cluster: ClusterOf | undefined, threads = 1, extraEnv: Record<string, string> = {}) =>
  Effect.gen(function*() {
    const home = Path.join(dir, name)
    Fs.mkdirSync(Path.join(home, "run"), { recursive: true, mode: 0o700 })
    let output = ""
    let exited = false
    const child = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const env: NodeJS.ProcessEnv = {}
        for (const [k, v] of Object.entries(process.env)) if (!k.startsWith("NATIVEGEN_") && !k.startsWith("XDG_")) env[k] = v
        const child = ChildProcess.spawn(process.execPath, [Path.join(projectRoot, "bin", "nativegen.js"), "serve"], {
          cwd: projectRoot,
          env: {
            ...env,
            HOME: home,
            XDG_DATA_HOME: Path.join(home, "data"),
            XDG_RUNTIME_DIR: Path.join(home, "run"),
            NATIVEGEN_THREADS: String(threads),
            NATIVEGEN_ADMISSION_GENERATION_CONTEXT_CAP: "2048",
            NATIVEGEN_ADMISSION_DECISION_CONTEXT_CAP: "512",
            ...extraEnv,
            ...(cluster === undefined ? {} : {
              NATIVEGEN_CLUSTER: cluster.address,
              NATIVEGEN_CLUSTER_STORAGE: cluster.storage,
              NATIVEGEN_CLUSTER_SHARDS: String(cluster.shards)
            })
          },
          stdio: ["ignore", "pipe", "pipe"],
          detached: true
        })
        child.stdout.setEncoding("utf8").on("data", (s: string) => (output += s))
        child.stderr.setEncoding("utf8").on("data", (s: string) => (output += s))
        child.once("close", () => (exited = true))
        return child
      }),
      (child) =>
        Effect.gen(function*() {
          const closed = new Promise<void>((resolve) => child.exitCode !== null ? resolve() : child.once("close", () => resolve()))
          try {
            process.kill(-child.pid!, "SIGINT")
          } catch {}
          yield* Effect.promise(() => closed).pipe(
            Effect.timeout("20 seconds"),
            Effect.catchAll(() => Effect.sync(() => process.kill(-child.pid!, "SIGKILL")))
          )
        })
    )
    yield* Effect.suspend(() =>
      /ready \(engine 1/.test(output) ? Effect.void : exited ? Effect.die(new Error(`${name} exited:\n${output}`)) : Effect.fail("not ready")
    ).pipe(
      Effect.retry(Schedule.spaced("200 millis").pipe(Schedule.upTo("300 seconds"))),
      Effect.orDieWith(() => new Error(`${name} (pid ${child.pid}) not ready:\n${output}`))
    )
    const socket = Path.join(home, "run", "nativegen", "nativegen.sock")
    const stored = cluster === undefined ? undefined : cluster.address.startsWith("/") ? `${cluster.address}:0` : cluster.address
    const served: Served = { name, socket, pid: child.pid!, stored }
    return served
  })

/**
 * The shard locks once the cluster settled: every shard locked, each runner holding some, the
 * same in two reads 1.5 s apart.
 */
export const settled = (stored: ReadonlyArray<string>, shards: number): Effect.Effect<Status.ClusterSnapshot, never, SqlClient.SqlClient | Sharding> =>
  Effect.gen(function*() {
    const read = Effect.flatMap(Status.snapshot, (s) => {
      const owners = new Set(s.shards?.values() ?? [])
      return s.shards?.size === shards && stored.every((a) => owners.has(a)) ? Effect.succeed(s) : Effect.fail("not settled")
    })
    const a = yield* Effect.retry(read, Schedule.spaced("250 millis").pipe(Schedule.upTo("90 seconds")))
    yield* Effect.sleep("1500 millis")
    const b = yield* read
    return JSON.stringify([...a.shards!].sort()) === JSON.stringify([...b.shards!].sort()) ? b : yield* Effect.fail("moved")
  }).pipe(
    Effect.retry({ times: 10 }),
    Effect.timeoutFail({ duration: "180 seconds", onTimeout: () => "the shard locks did not settle within 180 s" }),
    Effect.orDie
  )

/** A conversation id (`prefix-i`) whose shard `owner` holds. */
export const ownedBy = (snapshot: Status.ClusterSnapshot, owner: string, prefix: string) =>
  Effect.gen(function*() {
    for (let i = 0; i < 100_000; i++) {
      const id = `${prefix}-${i}`
      if ((yield* Status.ownerOf(snapshot, id)) === owner) return id
    }
    return yield* Effect.dieMessage(`no conversation id owned by ${owner}`)
  })

const TICK_MS = 1000 / 100 // CLK_TCK is 100 on Linux x86-64 (getconf CLK_TCK)

export type Role = "server" | "engine"

/**
 * CPU milliseconds (user + system) of a server process and its live descendants, by pid, with its
 * role: the engine children (`child.js`, in process groups of their own) or the server (the node
 * process itself and its helpers, esbuild's service).
 */
export const cpuOfTree = (root: number): Map<number, { readonly role: Role; readonly ms: number }> => {
  const all = new Map<number, { ppid: number; ms: number }>()
  for (const entry of Fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = Fs.readFileSync(`/proc/${entry}/stat`, "utf8")
      // pid (comm) state ppid ...; utime and stime are fields 14 and 15 (comm may hold spaces).
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
      all.set(Number(entry), { ppid: Number(fields[1]), ms: (Number(fields[11]) + Number(fields[12])) * TICK_MS })
    } catch {
      continue
    }
  }
  const out = new Map<number, { role: Role; ms: number }>()
  const visit = (pid: number) => {
    const p = all.get(pid)
    if (p === undefined) return
    let role: Role = "server"
    if (pid !== root) {
      try {
        role = Fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("child.js") ? "engine" : "server"
      } catch {}
    }
    out.set(pid, { role, ms: p.ms })
    for (const [child, c] of all) if (c.ppid === pid) visit(child)
  }
  visit(root)
  return out
}

/** CPU ms a process tree used between two readings, by role (processes gone meanwhile are not counted). */
export const cpuBetween = (
  before: ReturnType<typeof cpuOfTree>,
  after: ReturnType<typeof cpuOfTree>
): Record<Role, number> => {
  const used = { server: 0, engine: 0 }
  for (const [pid, now] of after) used[now.role] += now.ms - (before.get(pid)?.ms ?? 0)
  return used
}

export const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length === 0 ? NaN : s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2
}

/** Median with its range. */
export const summary = (xs: ReadonlyArray<number>) => ({ median: median(xs), min: Math.min(...xs), max: Math.max(...xs), n: xs.length })

export const loadavg = () => Os.loadavg().map((l) => Number(l.toFixed(2)))

/** Writes bench/results/NAME.json. */
export const writeResult = (name: string, value: unknown) => {
  const file = Path.join(projectRoot, "bench", "results", `${name}.json`)
  Fs.mkdirSync(Path.dirname(file), { recursive: true })
  Fs.writeFileSync(file, JSON.stringify(value, null, 2) + "\n")
  console.log(`results: ${Path.relative(projectRoot, file)}`)
}
