/**
 * A development tool (not a figure): where the peer benchmark's follow-up spends its time, per
 * process and per stage, through a real `nativegen serve` (bench/peer/Nativegen.ts) on qwen-bench
 * at 1 thread with the peer benchmark's prompts (bench/peer/Prompts.ts). Per round: turn 1 of a
 * conversation (cold), then its follow-up with turn 1's checkpoint; over the follow-up only, the
 * CPU time of the client (this process), the host, the engine child's main thread (JavaScript)
 * and its other threads (the native prefill and decode: the floor), from /proc schedstat (ns). The last round is
 * sampled by V8's profiler in all three processes (bench/_sigprof.cjs) and summarised per function
 * (bench/_profile.ts) as shares of the CPU measured in the unprofiled rounds.
 * Run: `NATIVEGEN_MODEL_CACHE=.cache/models node --import tsx bench/_followup-stages.ts [rounds]`.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import * as Fs from "node:fs"
import * as Inspector from "node:inspector"
import * as Os from "node:os"
import * as Path from "node:path"
import { ensureModel } from "../fixtures/models.js"
import { type Profile, summarize } from "./_profile.js"
import * as Nativegen from "./peer/Nativegen.js"
import { followUp, history, userPrompt } from "./peer/Prompts.js"

const ROUNDS = Number(process.argv[2] ?? 3)
const TOP = 12
const loadavg = () => Fs.readFileSync("/proc/loadavg", "utf8").trim()
const statFields = (file: string) => {
  const stat = Fs.readFileSync(file, "utf8")
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ")
}
const parentOf = (pid: number) => Number(statFields(`/proc/${pid}/stat`)[1])

/** CPU ms a thread has run (/proc/.../schedstat: nanoseconds, not the 10 ms ticks of stat). */
const threadCpu = (pid: number, tid: number) => Number(Fs.readFileSync(`/proc/${pid}/task/${tid}/schedstat`, "utf8").split(" ")[0]) / 1e6
/** CPU ms of all of a process's threads, and of its main thread. */
const processCpu = (pid: number) => {
  let main = 0
  let others = 0
  for (const tid of Fs.readdirSync(`/proc/${pid}/task`)) {
    try {
      const ms = threadCpu(pid, Number(tid))
      if (Number(tid) === pid) main = ms
      else others += ms
    } catch {
      // The thread ended between the listing and the read.
    }
  }
  return { main, others }
}

/** CPU ms of the client, the host, the child's main thread and the child's other threads (the native work). */
const snapshot = (hostPid: number, childPid: number) => {
  const child = processCpu(childPid)
  const host = processCpu(hostPid)
  const client = processCpu(process.pid)
  return { client: client.main + client.others, host: host.main + host.others, childMain: child.main, childNative: child.others }
}
type Snapshot = ReturnType<typeof snapshot>
const minus = (a: Snapshot, b: Snapshot): Snapshot => ({
  client: a.client - b.client,
  host: a.host - b.host,
  childMain: a.childMain - b.childMain,
  childNative: a.childNative - b.childNative
})

const program = Effect.scoped(Effect.gen(function*() {
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "nativegen-followup-stages-"))
  yield* Effect.addFinalizer(() => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true })))
  const env = { NODE_OPTIONS: `--require ${Path.join(import.meta.dirname, "_sigprof.cjs")}`, CPU_PROFILE_DIR: dir }
  const served = yield* Nativegen.serve({ modelPath: ensureModel("qwen-bench"), modelName: "qwen-bench", threads: 1, contextSize: 8192 }, env)
  const hostPid = parentOf(served.enginePid)
  console.log(`host ${hostPid}, engine child ${served.enginePid}; load ${loadavg()}`)
  const rows: Array<Snapshot & { short: Snapshot & { first: number }; first: number; firstTokenMillis: number; reused: number; prompt: number }> = []
  let profiles: { client: Profile; host: Profile; child: Profile } | undefined
  for (let r = 0; r <= ROUNDS; r++) {
    const profiling = r === ROUNDS
    const seed = `stages/${r}`
    const conversation = `stages-${r}`
    const turn1 = history(seed, 3800)
    const first = yield* Nativegen.generate(served.provider, { messages: turn1, conversation, maxTokens: 4, sampling: { temperature: 0 } })
    const request = {
      messages: followUp(seed, turn1, first.answer, 200),
      conversation,
      ...(first.checkpoint === undefined ? {} : { checkpoint: first.checkpoint }),
      maxTokens: 1,
      sampling: { temperature: 0 }
    }
    let session: Inspector.Session | undefined
    const post = (method: string, params?: object) =>
      Effect.async<unknown>((resume) => session!.post(method, params, (error, result) => resume(error === null ? Effect.succeed(result) : Effect.die(error))))
    const toggle = () => {
      process.kill(hostPid, "SIGUSR2")
      process.kill(served.enginePid, "SIGUSR2")
    }
    if (profiling) {
      session = new Inspector.Session()
      session.connect()
      yield* post("Profiler.enable")
      yield* post("Profiler.setSamplingInterval", { interval: 200 })
      toggle()
      yield* post("Profiler.start")
    }
    // A 1-token request of 8 words beside it: what any request costs, history or not.
    const shortBefore = snapshot(hostPid, served.enginePid)
    const short = yield* Nativegen.generate(served.provider, { messages: userPrompt(`${seed}/short`, 8), maxTokens: 1, sampling: { temperature: 0 } })
    const shortUsed = minus(snapshot(hostPid, served.enginePid), shortBefore)
    const before = snapshot(hostPid, served.enginePid)
    const second = yield* Nativegen.generate(served.provider, request)
    const used = minus(snapshot(hostPid, served.enginePid), before)
    if (profiling) {
      const { profile } = (yield* post("Profiler.stop")) as { profile: Profile }
      toggle()
      session!.disconnect()
      const read = (pid: number) =>
        Effect.suspend(() => {
          const file = Path.join(dir, `${pid}.cpuprofile`)
          return Fs.existsSync(file) ? Effect.succeed(JSON.parse(Fs.readFileSync(file, "utf8")) as Profile) : Effect.fail("not yet")
        }).pipe(Effect.retry(Schedule.spaced("20 millis").pipe(Schedule.upTo("10 seconds"))), Effect.orDie)
      profiles = { client: profile, host: yield* read(hostPid), child: yield* read(served.enginePid) }
      if (process.env.FOLLOWUP_PROFILES !== undefined) {
        for (const [name, p] of Object.entries(profiles)) Fs.writeFileSync(`${process.env.FOLLOWUP_PROFILES}-${name}.cpuprofile`, JSON.stringify(p))
      }
    } else {
      const row = { ...used, short: { ...shortUsed, first: Math.round(short.arrivals[0]!) }, first: second.arrivals[0]!, firstTokenMillis: second.firstTokenMillis, reused: second.reusedTokens, prompt: second.promptTokens }
      rows.push(row)
      console.log(JSON.stringify({ round: r, ...row, load: loadavg() }))
    }
  }
  const mean = (f: (r: (typeof rows)[number]) => number) => rows.reduce((a, r) => a + f(r), 0) / rows.length
  const m = { client: mean((r) => r.client), host: mean((r) => r.host), childMain: mean((r) => r.childMain), childNative: mean((r) => r.childNative) }
  const s = { client: mean((r) => r.short.client), host: mean((r) => r.short.host), childMain: mean((r) => r.short.childMain), childNative: mean((r) => r.short.childNative) }
  const total = m.client + m.host + m.childMain + m.childNative
  console.log(`\n## follow-up (${rows[0]?.reused} of ${rows[0]?.prompt} tokens reused), CPU ms, mean of ${rows.length}; load ${loadavg()}`)
  console.log(`| process | follow-up CPU ms | share | 1-token 8-word request CPU ms |\n|---|---|---|---|`)
  for (const k of Object.keys(m) as Array<keyof typeof m>) console.log(`| ${k} | ${m[k].toFixed(1)} | ${((m[k] / total) * 100).toFixed(1)}% | ${s[k].toFixed(1)} |`)
  console.log(`wall ms to the first token at the client, 1-token request: ${rows.map((r) => r.short.first).join(", ")}`)
  console.log(`wall ms to the first token at the client: ${rows.map((r) => Math.round(r.first)).join(", ")}`)
  if (profiles !== undefined) {
    for (const [name, profile, cpu] of [["client", profiles.client, m.client], ["host", profiles.host, m.host], ["child main thread", profiles.child, m.childMain]] as const) {
      const p = summarize(profile, cpu, TOP)
      console.log(`\n### ${name}: ${cpu.toFixed(1)} CPU ms; self time, ms`)
      console.log(`by module: ${p.byModule.slice(0, 10).map((x) => `${x.module} ${x.msPerToken.toFixed(1)}`).join(", ")}`)
      for (const f of p.byFunction) console.log(`  ${f.msPerToken.toFixed(1)}  ${f.fn}  [${f.module}]`)
      console.log(`the repository's functions, inclusive:`)
      for (const f of p.ownInclusive) console.log(`  ${f.msPerToken.toFixed(1)}  ${f.fn}`)
    }
  }
}))

NodeRuntime.runMain(program)
