/**
 * `npm run bench [name...]`: runs each benchmark script in bench/ (or the named ones) in its own
 * process, one after another, so that their measurements do not disturb each other.
 */
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Path from "node:path"

const dir = import.meta.dirname
const all = Fs.readdirSync(dir)
  .filter((f) => f.endsWith(".ts") && f !== "run.ts" && !f.startsWith("_"))
  .map((f) => f.slice(0, -3))
const names = process.argv.length > 2 ? process.argv.slice(2) : all
for (const name of names) {
  if (!all.includes(name)) throw new Error(`unknown benchmark ${name}; known: ${all.join(", ")}`)
  console.log(`\n== ${name}`)
  const result = ChildProcess.spawnSync(process.execPath, ["--import", "tsx", Path.join(dir, `${name}.ts`)], {
    stdio: "inherit",
    env: { ...process.env, UV_THREADPOOL_SIZE: "1" }
  })
  if (result.status !== 0) process.exitCode = 1
}
