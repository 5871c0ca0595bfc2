/**
 * Once per test run: generate the named test models into the cache (workers then find them
 * verified), and after the run fail if any engine child outlived the suite.
 */
import * as ChildProcess from "node:child_process"
import { ensureModel } from "../fixtures/models.js"

const engineChildren = (): Array<string> => {
  const out = ChildProcess.spawnSync("pgrep", ["-f", "src/native/child.ts"], { encoding: "utf8" })
  return out.stdout.split("\n").filter((line) => line.trim() !== "" && Number(line) !== process.pid)
}

export const setup = () => {
  for (const name of ["tiny", "decision", "small"] as const) ensureModel(name)
}

export const teardown = () => {
  const left = engineChildren()
  if (left.length > 0) throw new Error(`engine children outlived the test suite: pids ${left.join(", ")}`)
}
