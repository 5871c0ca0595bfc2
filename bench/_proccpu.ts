/**
 * CPU time of processes and threads from /proc (Linux): utime + stime in ms, per process, per
 * thread with its name, and this process's own; the load average. Shared by the benchmarks that
 * say where CPU goes (bench/tokencost.ts, bench/concurrentcost.ts).
 */
import * as Fs from "node:fs"

const TICK_MS = 1000 / 100

export const loadavg = () => Fs.readFileSync("/proc/loadavg", "utf8").trim()

/** The fields of a /proc stat line after the command name (field 3, the state, is index 0). */
const statFields = (file: string) => {
  const stat = Fs.readFileSync(file, "utf8")
  return { comm: stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")")), fields: stat.slice(stat.lastIndexOf(")") + 2).split(" ") }
}
/** utime + stime in ms (fields 14 and 15). */
const cpuOfStat = (fields: ReadonlyArray<string>) => (Number(fields[11]) + Number(fields[12])) * TICK_MS

/** CPU ms of a whole process (all its threads). */
export const processCpu = (pid: number) => cpuOfStat(statFields(`/proc/${pid}/stat`).fields)

export const parentOf = (pid: number) => Number(statFields(`/proc/${pid}/stat`).fields[1])

/** Per thread of `pid`: its name and CPU ms. */
export const threadCpu = (pid: number): Map<number, { readonly name: string; readonly ms: number }> => {
  const threads = new Map<number, { name: string; ms: number }>()
  for (const tid of Fs.readdirSync(`/proc/${pid}/task`)) {
    try {
      const { comm, fields } = statFields(`/proc/${pid}/task/${tid}/stat`)
      threads.set(Number(tid), { name: comm, ms: cpuOfStat(fields) })
    } catch {
      // The thread ended between the listing and the read.
    }
  }
  return threads
}

/** This process's CPU ms. */
export const selfCpu = () => {
  const u = process.cpuUsage()
  return (u.user + u.system) / 1000
}
