/**
 * A development tool (not a figure): where the servers' JavaScript goes in a follow-up turn's
 * trip through the cluster. Two `nativegen serve --cluster` runners (SQLite, Unix sockets, as
 * bench/cluster.ts), conversations entered at r1: owned by r2 (remote) and by r1 (local). Each
 * follow-up asks for one token, so what it costs the servers is the request's way to the engine
 * and the first chunk's way back. Per kind, the servers' CPU per follow-up (r1 and r2 apart, from
 * /proc, in unprofiled rounds); then the last HOP_PROFILED remote follow-ups are sampled by V8's
 * profiler in both runners (bench/_sigprof.cjs) and summarised per function as shares of it.
 * Run: `NATIVEGEN_MODEL_CACHE=.cache/models UV_THREADPOOL_SIZE=1 node --import tsx bench/_cluster-hop-profile.ts [rounds]`.
 */
import * as Chunk from "effect/Chunk"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schedule from "effect/Schedule"
import * as Stream from "effect/Stream"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Runner from "../src/cluster/Runner.js"
import type { ChatMessage, GenerateChunk } from "../src/domain/Inference.js"
import * as Client from "../src/rpc/Client.js"
import { Provider } from "../src/services/Provider.js"
import { clusterStorage, cpuBetween, cpuOfTree, loadavg, ownedBy, serve, settled } from "./_cluster.js"
import { type Profile, summarize } from "./_profile.js"

const ROUNDS = Number(process.argv[2] ?? 30)
const PROFILED = Number(process.env.HOP_PROFILED ?? 20)
const SHARDS = 12
const TOP = 25

const answerOf = (chunks: ReadonlyArray<GenerateChunk>) =>
  chunks.map((c) => (c._tag === "Text" && c.channel === "answer" ? c.text : "")).join("")

const main = Effect.gen(function*() {
  const dir = yield* Effect.acquireRelease(
    Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "ngh-"))),
    (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
  )
  const profiles = Path.join(dir, "profiles")
  Fs.mkdirSync(profiles)
  const env = { NODE_OPTIONS: `--require ${Path.join(import.meta.dirname, "_sigprof.cjs")}`, CPU_PROFILE_DIR: profiles }
  const { arg: storage, spec } = yield* clusterStorage(dir, "hop")
  const [r1, r2] = yield* Effect.all([
    serve(dir, "r1", { address: Path.join(dir, "r1.sock"), storage, shards: SHARDS }, 1, env),
    serve(dir, "r2", { address: Path.join(dir, "r2.sock"), storage, shards: SHARDS }, 1, env)
  ], { concurrency: "unbounded" })
  const provider = Context.get(yield* Layer.build(Client.layer({ socketPath: r1.socket })), Provider)
  const view = yield* Layer.build(Runner.layerClientOnly({ storage: spec, shards: SHARDS }))
  const snapshot = yield* settled([r1.stored!, r2.stored!], SHARDS).pipe(Effect.provide(view))

  const settings = { sampling: { temperature: 0 }, thinking: false } as const
  /** The CPU ms r1 and r2 used (servers only) over a one-token follow-up of a fresh conversation. */
  const followUp = (id: string, profile: boolean) =>
    Effect.gen(function*() {
      const user1: ChatMessage = { role: "user", content: `${id}: tell me about the sea and the ships on it` }
      const one = Chunk.toArray(yield* Stream.runCollect(provider.generate({ messages: [user1], conversation: id, maxTokens: 8, ...settings })))
      const done = one.at(-1)
      if (done?._tag !== "Done") return yield* Effect.dieMessage("no Done chunk")
      const before = [r1, r2].map((s) => cpuOfTree(s.pid))
      if (profile) for (const s of [r1, r2]) process.kill(s.pid, "SIGUSR2")
      const start = performance.now()
      const two = Chunk.toArray(yield* Stream.runCollect(provider.generate({
        messages: [user1, { role: "assistant", content: answerOf(one) }, { role: "user", content: "and the harbor?" }],
        conversation: id,
        checkpoint: done.checkpoint!,
        maxTokens: 1,
        ...settings
      })))
      const wall = performance.now() - start
      if (profile) for (const s of [r1, r2]) process.kill(s.pid, "SIGUSR2")
      const [a, b] = [r1, r2].map((s, i) => cpuBetween(before[i]!, cpuOfTree(s.pid)).server)
      const last = two.at(-1)
      if (last?._tag !== "Done" || last.usage.reuse !== "continuation") return yield* Effect.dieMessage(`follow-up of ${id} not a continuation`)
      return { r1: a!, r2: b!, wall, owner: last.timings.totalMillis }
    })

  const rows = { local: [] as Array<{ r1: number; r2: number; wall: number; owner: number }>, remote: [] as Array<{ r1: number; r2: number; wall: number; owner: number }> }
  for (let round = 0; round < ROUNDS; round++) {
    for (const where of ["local", "remote"] as const) {
      const id = yield* ownedBy(snapshot, where === "local" ? r1.stored! : r2.stored!, `hop-${where}-${round}`).pipe(Effect.provide(view))
      rows[where].push(yield* followUp(id, false))
    }
  }
  const mean = (xs: ReadonlyArray<number>) => xs.reduce((a, b) => a + b, 0) / xs.length
  for (const [where, xs] of Object.entries(rows)) {
    const sorted = (f: (x: (typeof xs)[number]) => number) => xs.map(f).sort((a, b) => a - b)
    const med = (f: (x: (typeof xs)[number]) => number) => sorted(f)[Math.floor(xs.length / 2)]!.toFixed(2)
    console.log(`${where}: servers' CPU per one-token follow-up, mean: r1 ${mean(xs.map((x) => x.r1)).toFixed(2)} ms, r2 ${mean(xs.map((x) => x.r2)).toFixed(2)} ms; ` +
      `client wall median ${med((x) => x.wall)} ms, owner's total median ${med((x) => x.owner)} ms`)
  }
  // The profiled rounds: remote follow-ups only, both runners sampled over the follow-up alone.
  for (let round = 0; round < PROFILED; round++) {
    const id = yield* ownedBy(snapshot, r2.stored!, `hop-profiled-${round}`).pipe(Effect.provide(view))
    yield* followUp(id, true)
    const read = (pid: number) =>
      Effect.suspend(() => {
        const file = Path.join(profiles, `${pid}.cpuprofile`)
        if (!Fs.existsSync(file)) return Effect.fail("not yet")
        const profile = JSON.parse(Fs.readFileSync(file, "utf8")) as Profile
        Fs.rmSync(file)
        return Effect.succeed(profile)
      }).pipe(Effect.retry(Schedule.spaced("20 millis").pipe(Schedule.upTo("10 seconds"))), Effect.orDie)
    for (const [name, s] of [["r1", r1], ["r2", r2]] as const) {
      const profile = yield* read(s.pid)
      Fs.writeFileSync(Path.join(dir, `${name}-${round}.cpuprofile`), JSON.stringify(profile))
    }
  }
  /** The profiled rounds' samples of one runner, as one profile (the rounds' node ids are their own: kept apart by an offset). */
  const merged = (name: string): Profile => {
    const nodes: Array<Profile["nodes"][number]> = []
    const samples: Array<number> = []
    const timeDeltas: Array<number> = []
    for (let round = 0; round < PROFILED; round++) {
      const p = JSON.parse(Fs.readFileSync(Path.join(dir, `${name}-${round}.cpuprofile`), "utf8")) as Profile
      const offset = round * 1_000_000
      // The profiler's own start and stop (its session's dispatch, the preload's handler) count as idle.
      const own = (frame: Profile["nodes"][number]["callFrame"]) => frame.functionName === "dispatch" || frame.url.endsWith("_sigprof.cjs")
      for (const n of p.nodes) {
        const callFrame = own(n.callFrame) ? { ...n.callFrame, functionName: "(idle)" } : n.callFrame
        nodes.push({ id: n.id + offset, callFrame, ...(n.children === undefined ? {} : { children: n.children.map((c) => c + offset) }) })
      }
      samples.push(...p.samples.map((s) => s + offset))
      timeDeltas.push(...p.timeDeltas)
    }
    return { nodes, samples, timeDeltas }
  }
  for (const name of ["r1", "r2"] as const) {
    const cpu = mean(rows.remote.map((x) => x[name]))
    const p = summarize(merged(name), cpu, TOP)
    console.log(`\n### ${name} (${name === "r1" ? "entry" : "owner"}), remote follow-up: ${cpu.toFixed(2)} CPU ms; self time, ms`)
    console.log(`by module: ${p.byModule.slice(0, 12).map((x) => `${x.module} ${x.msPerToken.toFixed(2)}`).join(", ")}`)
    for (const f of p.byFunction) console.log(`  ${f.msPerToken.toFixed(2)}  ${f.fn}  [${f.module}]`)
    console.log(`the repository's functions, inclusive:`)
    for (const f of p.ownInclusive) console.log(`  ${f.msPerToken.toFixed(2)}  ${f.fn}`)
  }
  console.log(`\nload ${loadavg().join(" ")}`)
})

Effect.runPromise(Effect.scoped(main)).then(() => process.exit(0), (error) => {
  console.error(error)
  process.exit(1)
})
