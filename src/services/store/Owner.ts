/**
 * Process identity for files that belong to a living process (staging files, lease files): a
 * token `<pid>-<start>` where `start` is the process start time in clock ticks since boot
 * (field 22 of /proc/<pid>/stat). A token's owner is alive when the pid exists and, where /proc
 * exists, still has the same start time; a recycled pid therefore does not keep a dead owner's
 * files alive. Without /proc (macOS) the start time is 0 and only the pid is checked.
 */
import * as Fs from "node:fs"

/** The start time of a running process; undefined when it is gone or a zombie (it maps nothing). */
const startTimeOf = (pid: number): string | undefined => {
  try {
    const stat = Fs.readFileSync(`/proc/${pid}/stat`, "latin1")
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
    if (fields[0] === "Z" || fields[0] === "X") return undefined
    const start = fields[19]
    return start !== undefined && /^\d+$/.test(start) ? start : undefined
  } catch {
    return undefined
  }
}

const hasProc = Fs.existsSync("/proc/self/stat")

/** An owner token: `<pid>-<start>`. */
export interface Owner {
  readonly pid: number
  readonly start: string
}

export const format = (owner: Owner) => `${owner.pid}-${owner.start}`

/** Parses `<pid>-<start>` at the beginning of `text` (up to the next `.`). */
export const parse = (text: string): Owner | undefined => {
  const m = /^(\d{1,10})-(\d{1,20})(?:\.|$)/.exec(text)
  if (m === null) return undefined
  const pid = Number(m[1])
  return pid > 0 ? { pid, start: m[2]! } : undefined
}

/** This process. */
export const self = (): Owner => ({ pid: process.pid, start: hasProc ? startTimeOf(process.pid) ?? "0" : "0" })

/** Whether the owner process still runs (same pid and, where knowable, same start time). */
export const isAlive = (owner: Owner): boolean => {
  if (owner.pid === process.pid) return owner.start === self().start
  try {
    process.kill(owner.pid, 0)
  } catch (e) {
    if (typeof e === "object" && e !== null && "code" in e && e.code === "EPERM") {
      // Exists but belongs to another user: alive, unless /proc says it was recycled.
    } else {
      return false
    }
  }
  if (!hasProc) return true
  const start = startTimeOf(owner.pid)
  return start !== undefined && start === owner.start
}
