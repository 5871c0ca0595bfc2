/**
 * `npm run bench cluster-kill`: the Jepsen-style tally of test/cluster/kill-tally.test.ts with 20
 * SIGKILLs (the suite runs 3): three real runners, clients sending turns without pause, r2 and r3
 * killed in turn mid-stream and started again. Prints the tally (how every request ended, the time
 * to serve again after each kill) from the test's log. BENCH_CLUSTER_POSTGRES (a server URL,
 * `.ci/postgres start DIR` prints one): the runner storage on PostgreSQL instead of a SQLite file.
 */
import * as ChildProcess from "node:child_process"
import * as Path from "node:path"

const root = Path.join(import.meta.dirname, "..")
const kills = process.env.NATIVEGEN_KILL_TALLY_KILLS ?? "20"
const postgres = process.env.BENCH_CLUSTER_POSTGRES
const storage = postgres === undefined ? {} : { NATIVEGEN_KILL_TALLY_STORAGE: "postgres", NATIVEGEN_TEST_POSTGRES: postgres }
const result = ChildProcess.spawnSync(
  "npx",
  ["vitest", "run", "test/cluster/kill-tally.test.ts"],
  { cwd: root, stdio: "inherit", env: { ...process.env, NATIVEGEN_KILL_TALLY_KILLS: kills, ...storage } }
)
process.exitCode = result.status ?? 1
