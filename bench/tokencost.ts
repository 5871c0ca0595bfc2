/**
 * `npm run bench tokencost`: where the CPU of a decoded token goes, per process, through a real
 * `nativegen serve` (bench/peer/Nativegen.ts) and the RPC client, on the `qwen-bench` model,
 * against the plain in-process node-llama-cpp loop (bench/_inprocess.ts) on the same prompt, at
 * each thread count. Per round (the two sides alternate which goes first) it reads the CPU time of
 * the client (this process), the host (`nativegen serve`), the engine child's main thread and each
 * of its other threads (/proc/<pid>/task/<tid>/stat: ggml's compute threads, libuv's pool, V8's),
 * before and after one streamed greedy generation, and divides by the tokens generated. Then one
 * more generation is sampled by V8's CPU profiler in all three processes (bench/_sigprof.cjs,
 * started and stopped around that generation only) and summarised as self time per function and
 * per module (through the bundle's source maps), in ms per token.
 *
 * Prints the table and writes bench/results/tokencost.json. Environment: TOKENCOST_TOKENS (300),
 * TOKENCOST_ROUNDS (2), TOKENCOST_THREADS ("1,2"), TOKENCOST_PROFILE ("0": no profile pass),
 * TOKENCOST_TOP (functions listed per process, 15); BENCH_BACKEND and BENCH_MODEL (bench/_target.ts).
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Inspector from "node:inspector"
import * as Os from "node:os"
import * as Path from "node:path"
import { promisify } from "node:util"
import { ensureModel, projectRoot } from "../fixtures/models.js"
import { tokenArrivals } from "./_generation.js"
import { loadavg, parentOf, processCpu, selfCpu, threadCpu } from "./_proccpu.js"
import { type Profile, summarize } from "./_profile.js"
import { benchBackend, benchModel } from "./_target.js"
import * as Nativegen from "./peer/Nativegen.js"
import { chatMl, userPrompt } from "./peer/Prompts.js"

const TOKENS = Number(process.env.TOKENCOST_TOKENS ?? 300)
const ROUNDS = Number(process.env.TOKENCOST_ROUNDS ?? 2)
const THREADS = (process.env.TOKENCOST_THREADS ?? "1,2").split(",").map(Number)
const PROFILE = process.env.TOKENCOST_PROFILE !== "0"
const TOP = Number(process.env.TOKENCOST_TOP ?? 15)
const CONTEXT = 2048
const MODEL_NAME = benchModel("qwen-bench")
const modelPath = ensureModel(MODEL_NAME)
const execFile = promisify(ChildProcess.execFile)

// ---------------------------------------------------------------------------------------------
// CPU time per process
// ---------------------------------------------------------------------------------------------

interface Snapshot {
  readonly client: number
  readonly host: number
  readonly child: Map<number, { readonly name: string; readonly ms: number }>
}
const snapshot = (hostPid: number, childPid: number): Snapshot => ({
  client: selfCpu(),
  host: processCpu(hostPid),
  child: threadCpu(childPid)
})

/**
 * CPU ms per token per process between two snapshots. The child's threads: its main thread (the
 * JavaScript), and the rest grouped by name (ggml's compute threads and libuv's pool share the
 * main thread's name "node" where they do not rename themselves, so they are "other threads").
 */
const perToken = (before: Snapshot, after: Snapshot, childPid: number, tokens: number) => {
  let childMain = 0
  const others = new Map<string, number>()
  for (const [tid, t] of after.child) {
    const used = t.ms - (before.child.get(tid)?.ms ?? 0)
    if (tid === childPid) childMain = used
    else {
      const name = t.name === "node" ? "native threads" : t.name
      others.set(name, (others.get(name) ?? 0) + used)
    }
  }
  return {
    client: (after.client - before.client) / tokens,
    host: (after.host - before.host) / tokens,
    childMain: childMain / tokens,
    childThreads: Object.fromEntries(Array.from(others, ([name, ms]) => [name, ms / tokens]))
  }
}

// ---------------------------------------------------------------------------------------------
// The two sides
// ---------------------------------------------------------------------------------------------

interface Streamed {
  readonly tokens: number
  readonly messages: number
  /** Wall ms per decode token after the first arrival (as bench/peer.ts counts decode). */
  readonly msPerToken: number
}

/** One streamed greedy generation through the client: tokens, client reads and decode pace. */
const streamed = (provider: Nativegen.Served["provider"], messages: ReturnType<typeof userPrompt>) =>
  Effect.gen(function*() {
    const { arrivals, reads } = yield* tokenArrivals(provider.generate({ messages, maxTokens: TOKENS, sampling: { temperature: 0 } }))
    const first = arrivals[0]!
    const after = arrivals.filter((t) => t > first).length
    return { tokens: arrivals.length, messages: reads, msPerToken: (arrivals[arrivals.length - 1]! - first) / after } satisfies Streamed
  }).pipe(Effect.orDie)

/** The in-process loop on the same prompt: wall ms and CPU ms per decode token. */
const inProcess = (messages: ReturnType<typeof userPrompt>, threads: number) =>
  Effect.promise(async () => {
    const { stdout } = await execFile(process.execPath, [
      "--import", "tsx", Path.join(import.meta.dirname, "_inprocess.ts"),
      modelPath, JSON.stringify(chatMl(messages)), String(TOKENS), String(threads), "1"
    ], { env: { ...process.env, UV_THREADPOOL_SIZE: "1", NODE_OPTIONS: "" }, encoding: "utf8" })
    const [round] = JSON.parse(stdout.trim().split("\n").pop()!) as Array<{ tokens: number; ms: number; cpuMs: number }>
    return { msPerToken: round!.ms / round!.tokens, cpuPerToken: round!.cpuMs / round!.tokens }
  })

// ---------------------------------------------------------------------------------------------
// Profiles
// ---------------------------------------------------------------------------------------------

/** Profiles one generation in the client (this process), the host and the engine child (SIGUSR2: bench/_sigprof.cjs). */
const profiled = (
  served: Nativegen.Served,
  hostPid: number,
  dir: string,
  messages: ReturnType<typeof userPrompt>,
  measured: { readonly client: number; readonly host: number; readonly childMain: number }
) =>
  Effect.gen(function*() {
    const session = new Inspector.Session()
    session.connect()
    const post = (method: string, params?: object) =>
      Effect.async<unknown>((resume) => session.post(method, params, (error, result) => resume(error === null ? Effect.succeed(result) : Effect.die(error))))
    yield* post("Profiler.enable")
    yield* post("Profiler.setSamplingInterval", { interval: 200 })
    const toggle = () => {
      process.kill(hostPid, "SIGUSR2")
      process.kill(served.enginePid, "SIGUSR2")
    }
    toggle()
    yield* post("Profiler.start")
    const g = yield* streamed(served.provider, messages)
    const { profile } = (yield* post("Profiler.stop")) as { profile: Profile }
    toggle()
    session.disconnect()
    const read = (pid: number) =>
      Effect.suspend(() => {
        const file = Path.join(dir, `${pid}.cpuprofile`)
        return Fs.existsSync(file) ? Effect.succeed(JSON.parse(Fs.readFileSync(file, "utf8")) as Profile) : Effect.fail("not yet")
      }).pipe(Effect.retry(Schedule.spaced("20 millis").pipe(Schedule.upTo("10 seconds"))), Effect.orDie)
    const host = yield* read(hostPid)
    const child = yield* read(served.enginePid)
    return {
      tokens: g.tokens,
      client: summarize(profile, measured.client, TOP),
      host: summarize(host, measured.host, TOP),
      childMain: summarize(child, measured.childMain, TOP)
    }
  })

// ---------------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------------

const mean = (xs: ReadonlyArray<number>) => xs.reduce((a, b) => a + b, 0) / xs.length
const fmt = (x: number) => x.toFixed(3)

const atThreads = (threads: number) =>
  Effect.scoped(Effect.gen(function*() {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "nativegen-tokencost-"))
    yield* Effect.addFinalizer(() => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true })))
    const env = PROFILE ? { NODE_OPTIONS: `--require ${Path.join(import.meta.dirname, "_sigprof.cjs")}`, CPU_PROFILE_DIR: dir } : {}
    const served = yield* Nativegen.serve({ modelPath, modelName: MODEL_NAME, threads, contextSize: CONTEXT, backend: benchBackend }, env)
    const hostPid = parentOf(served.enginePid)
    console.log(`[${threads} thread(s)] host ${hostPid}, engine child ${served.enginePid}; load ${loadavg()}`)
    yield* streamed(served.provider, userPrompt("tokencost/warm", 30))
    const rounds = []
    for (let r = 0; r < ROUNDS; r++) {
      const messages = userPrompt(`tokencost/${threads}/${r}`, 30)
      const plainFirst = r % 2 === 1
      const plainBefore = plainFirst ? yield* inProcess(messages, threads) : undefined
      const before = snapshot(hostPid, served.enginePid)
      const g = yield* streamed(served.provider, messages)
      const after = snapshot(hostPid, served.enginePid)
      const plain = plainBefore ?? (yield* inProcess(messages, threads))
      const cpu = perToken(before, after, served.enginePid, g.tokens)
      const row = {
        tokens: g.tokens,
        messagesPerToken: g.messages / g.tokens,
        socketMsPerToken: g.msPerToken,
        inProcessMsPerToken: plain.msPerToken,
        ratio: plain.msPerToken / g.msPerToken,
        inProcessCpuPerToken: plain.cpuPerToken,
        ...cpu,
        load: loadavg()
      }
      rounds.push(row)
      console.log(`  round ${r + 1}${plainFirst ? " (in-process first)" : ""}: ${g.tokens} tokens in ${g.messages} client reads, ` +
        `${fmt(g.msPerToken)} ms/token vs in-process ${fmt(plain.msPerToken)} (ratio ${fmt(row.ratio)}); load ${row.load}`)
    }
    const measured = { client: mean(rounds.map((r) => r.client)), host: mean(rounds.map((r) => r.host)), childMain: mean(rounds.map((r) => r.childMain)) }
    const profile = PROFILE ? yield* profiled(served, hostPid, dir, userPrompt(`tokencost/${threads}/profile`, 30), measured) : undefined
    return { threads, rounds, profile }
  }))

const table = (result: Effect.Effect.Success<ReturnType<typeof atThreads>>) => {
  const { rounds, threads } = result
  const threadNames = Array.from(new Set(rounds.flatMap((r) => Object.keys(r.childThreads))))
  const lines = [
    `\n## ${threads} thread(s): ${rounds.length} rounds of ~${TOKENS} tokens (means); CPU ms per generated token`,
    `| process | ms/token |`,
    `|---|---|`,
    `| client (RPC client, this process) | ${fmt(mean(rounds.map((r) => r.client)))} |`,
    `| host (nativegen serve) | ${fmt(mean(rounds.map((r) => r.host)))} |`,
    `| engine child: main thread (JavaScript) | ${fmt(mean(rounds.map((r) => r.childMain)))} |`,
    ...threadNames.map((n) => `| engine child: ${n} | ${fmt(mean(rounds.map((r) => r.childThreads[n] ?? 0)))} |`),
    `| in-process loop, whole process | ${fmt(mean(rounds.map((r) => r.inProcessCpuPerToken)))} |`,
    ``,
    `wall ms per decode token: socket ${fmt(mean(rounds.map((r) => r.socketMsPerToken)))}, ` +
    `in-process ${fmt(mean(rounds.map((r) => r.inProcessMsPerToken)))}; ratio (in-process ÷ socket time) ${fmt(mean(rounds.map((r) => r.ratio)))}; ` +
    `client reads per token ${fmt(mean(rounds.map((r) => r.messagesPerToken)))}`,
    // Nearly all of the host's and the client's work is per message (one engine message is one
    // client message), so these stay put while messages per token change with the load.
    `CPU ms per message: host ${fmt(mean(rounds.map((r) => r.host / r.messagesPerToken)))}, ` +
    `client ${fmt(mean(rounds.map((r) => r.client / r.messagesPerToken)))}`
  ]
  const native = mean(rounds.map((r) => r.childThreads["native threads"] ?? 0))
  lines.push(`host + child JavaScript ÷ native threads: ${fmt((mean(rounds.map((r) => r.host)) + mean(rounds.map((r) => r.childMain))) / native)}`)
  if (result.profile !== undefined) {
    for (const process of ["client", "host", "childMain"] as const) {
      const p = result.profile[process]
      lines.push(`\n### profile: ${process}, ${fmt(p.cpu)} CPU ms/token measured (${result.profile.tokens} tokens); self time, ms/token`)
      lines.push(`by module: ${p.byModule.slice(0, 10).map((m) => `${m.module} ${fmt(m.msPerToken)}`).join(", ")}`)
      for (const f of p.byFunction) lines.push(`  ${fmt(f.msPerToken)}  ${f.fn}  [${f.module}]`)
      lines.push(`the repository's functions, inclusive:`)
      for (const f of p.ownInclusive) lines.push(`  ${fmt(f.msPerToken)}  ${f.fn}`)
    }
  }
  return lines.join("\n")
}

const program = Effect.gen(function*() {
  const results = []
  for (const threads of THREADS) {
    const result = yield* atThreads(threads)
    results.push(result)
    console.log(table(result))
  }
  const out = Path.join(import.meta.dirname, "results", "tokencost.json")
  Fs.writeFileSync(out, JSON.stringify({ date: new Date().toISOString(), loadavg: loadavg(), tokens: TOKENS, model: "qwen-bench", cpus: Os.cpus().length, results }, null, 2))
  console.log(`\nwrote ${Path.relative(projectRoot, out)}`)
})

// runMain: a SIGINT or SIGTERM interrupts the run, so the server is stopped and its home removed.
NodeRuntime.runMain(program)
