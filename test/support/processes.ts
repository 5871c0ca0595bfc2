/** Observing processes from tests: liveness by /proc state (a zombie counts as gone). */
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import * as Fs from "node:fs"

export const isAlive = (pid: number): boolean => {
  try {
    const stat = Fs.readFileSync(`/proc/${pid}/stat`, "utf8")
    const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3)
    return state !== "Z" && state !== "X"
  } catch {
    return false
  }
}

/** Waits (polling /proc, bounded) until the process is gone; fails if it is still there after `within`. */
export const awaitGone = (pid: number, within: "5 seconds" | "10 seconds" | "20 seconds" = "10 seconds") =>
  Effect.suspend(() => (isAlive(pid) ? Effect.fail(`process ${pid} is still alive`) : Effect.void)).pipe(
    Effect.retry(Schedule.spaced("50 millis").pipe(Schedule.upTo(within)))
  )
