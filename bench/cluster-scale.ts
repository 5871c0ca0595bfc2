/**
 * Aggregate throughput of a cluster, 3 runners vs 1: N concurrent clients, each running two-turn
 * conversations (the follow-up continues on the owner's KV), against
 *   - plain: one `nativegen serve` without a cluster (the one-machine baseline);
 *   - one-runner: a cluster of one runner;
 *   - three-one-entry: a cluster of three runners at 1 engine thread each, every client on runner
 *     1's socket (conversations owned elsewhere are forwarded);
 *   - three-all-entries: the same three runners, client i on runner i mod 3's socket.
 * plain and one-runner run BENCH_SCALE_SOLO_THREADS engine threads (default 1; 3 gives the three
 * runners' total, which on two loaded cores oversubscribes the engine's threads: docs/cluster.md)
 * and BENCH_SCALE_SOLO_SLOTS conversation slots (NATIVEGEN_SCHEDULER_SLOTS; 6 gives one engine the
 * three runners' slots; results then in cluster-scale-slotsN.json).
 * All servers are up for the whole run (Unix-socket transport, a runner storage per cluster); each
 * round runs every mode once, in a rotating order. Per mode and round: generated tokens per second
 * and turns per second over the wall time, and the CPU each server used (from /proc: the server
 * process and its engine children apart) per generated token; the servers not being measured are
 * counted too (their idle cost: heartbeats, shard-lock refreshes, load probes).
 *
 * On a machine with fewer cores than engines, three runners cannot add throughput: what this shows
 * there is the CPU the cluster adds per token (the entry's forwarding, the owner's entity, msgpack
 * over the socket) and its idle cost.
 *
 * BENCH_SCALE_CLIENTS (default 6), BENCH_SCALE_CONVERSATIONS (per client and round, default 1),
 * BENCH_SCALE_ROUNDS (default 3), BENCH_SCALE_TOKENS (per turn, default 32), BENCH_CLUSTER_POSTGRES
 * (a server URL: runner storage on PostgreSQL instead of SQLite).
 * Results: bench/results/cluster-scale.json.
 */
import * as Chunk from "effect/Chunk"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Stream from "effect/Stream"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Runner from "../src/cluster/Runner.js"
import type { ChatMessage, GenerateChunk, GenerateRequest } from "../src/domain/Inference.js"
import * as Client from "../src/rpc/Client.js"
import { Provider } from "../src/services/Provider.js"
import { clusterStorage, cpuBetween, cpuOfTree, loadavg, storageKind, type Served, serve, settled, summary, writeResult } from "./_cluster.js"

const CLIENTS = Number(process.env.BENCH_SCALE_CLIENTS ?? 6)
const CONVERSATIONS = Number(process.env.BENCH_SCALE_CONVERSATIONS ?? 1)
const ROUNDS = Number(process.env.BENCH_SCALE_ROUNDS ?? 3)
const TOKENS = Number(process.env.BENCH_SCALE_TOKENS ?? 32)
const SOLO_THREADS = Number(process.env.BENCH_SCALE_SOLO_THREADS ?? 1)
/** Conversation slots of the plain server's and the lone runner's engine (the runtime's default when unset). */
const SOLO_SLOTS = process.env.BENCH_SCALE_SOLO_SLOTS
const soloEnv: Record<string, string> = SOLO_SLOTS === undefined ? {} : { NATIVEGEN_SCHEDULER_SLOTS: SOLO_SLOTS }
const SHARDS = 12

type Mode = "plain" | "one-runner" | "three-one-entry" | "three-all-entries"
const modes: ReadonlyArray<Mode> = ["plain", "one-runner", "three-one-entry", "three-all-entries"]

const settings = { maxTokens: TOKENS, sampling: { temperature: 0 }, thinking: false } as const

const turn = (provider: Provider["Type"], request: GenerateRequest) =>
  Effect.gen(function*() {
    const chunks = Chunk.toArray(yield* Stream.runCollect(provider.generate(request)))
    const done = chunks.at(-1)
    if (done?._tag !== "Done") return yield* Effect.dieMessage("no Done chunk")
    return { chunks, done }
  })

const answerOf = (chunks: ReadonlyArray<GenerateChunk>) =>
  chunks.map((c) => (c._tag === "Text" && c.channel === "answer" ? c.text : "")).join("")

/** A two-turn conversation; the generated tokens of both turns and whether the follow-up continued. */
const conversation = (provider: Provider["Type"], id: string) =>
  Effect.gen(function*() {
    const user1: ChatMessage = { role: "user", content: `${id}: tell me about the sea and the ships on it` }
    const one = yield* turn(provider, { messages: [user1], conversation: id, ...settings })
    const two = yield* turn(provider, {
      messages: [user1, { role: "assistant", content: answerOf(one.chunks) }, { role: "user", content: "and the harbor?" }],
      conversation: id,
      checkpoint: one.done.checkpoint!,
      ...settings
    })
    return { tokens: one.done.usage.generatedTokens + two.done.usage.generatedTokens, reuse: two.done.usage.reuse }
  })

interface Phase {
  readonly mode: Mode
  readonly round: number
  readonly wallMs: number
  readonly tokens: number
  readonly turns: number
  /** How the follow-ups reused their conversation's KV (reuse kind -> count). */
  readonly followUps: Record<string, number>
  readonly tokensPerSecond: number
  readonly turnsPerSecond: number
  /** CPU ms per generated token of each process group: the measured mode's and the idle ones'. */
  readonly cpuPerToken: Record<string, { server: number; engine: number }>
  /** CPU ms per second of wall time of each server (server and engines together). */
  readonly cpuPerSecond: Record<string, number>
  readonly loadavg: ReadonlyArray<number>
}

const main = Effect.gen(function*() {
  const dir = yield* Effect.acquireRelease(
    Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "ngs-"))),
    (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
  )
  const oneStorage = yield* clusterStorage(dir, "one")
  const threeStorage = yield* clusterStorage(dir, "three")
  const one = { storage: oneStorage.arg, shards: SHARDS }
  const three = { storage: threeStorage.arg, shards: SHARDS }
  const servers = yield* Effect.all([
    serve(dir, "plain", undefined, SOLO_THREADS, soloEnv),
    serve(dir, "solo", { ...one, address: Path.join(dir, "solo.sock") }, SOLO_THREADS, soloEnv),
    serve(dir, "r1", { ...three, address: Path.join(dir, "r1.sock") }, 1),
    serve(dir, "r2", { ...three, address: Path.join(dir, "r2.sock") }, 1),
    serve(dir, "r3", { ...three, address: Path.join(dir, "r3.sock") }, 1)
  ], { concurrency: "unbounded" })
  const [plain, solo, r1, r2, r3] = servers
  const providers = new Map<string, Provider["Type"]>()
  for (const s of servers) providers.set(s.name, Context.get(yield* Layer.build(Client.layer({ socketPath: s.socket })), Provider))
  yield* settled([solo.stored!], SHARDS).pipe(
    Effect.provide(Runner.layerClientOnly({ storage: oneStorage.spec, shards: SHARDS }))
  )
  yield* settled([r1.stored!, r2.stored!, r3.stored!], SHARDS).pipe(
    Effect.provide(Runner.layerClientOnly({ storage: threeStorage.spec, shards: SHARDS }))
  )
  const entries = (mode: Mode): ReadonlyArray<Served> =>
    mode === "plain" ? [plain] : mode === "one-runner" ? [solo] : mode === "three-one-entry" ? [r1] : [r1, r2, r3]

  const phases: Array<Phase> = []
  for (let round = 0; round < ROUNDS; round++) {
    const order = modes.map((_, i) => modes[(i + round) % modes.length]!)
    for (const mode of order) {
      const at = entries(mode)
      const before = new Map(servers.map((s) => [s.name, cpuOfTree(s.pid)]))
      const start = performance.now()
      const results = yield* Effect.all(
        Array.from({ length: CLIENTS }, (_, client) =>
          Effect.forEach(
            Array.from({ length: CONVERSATIONS }, (_, k) => k),
            (k) =>
              conversation(providers.get(at[client % at.length]!.name)!, `scale-${mode}-${round}-${client}-${k}`).pipe(
                Effect.timeoutFail({ duration: "300 seconds", onTimeout: () => new Error(`${mode}: a conversation not served within 300 s (storage stalled? see docs/cluster.md)`) }),
                Effect.orDie
              )
          )),
        { concurrency: "unbounded" }
      ).pipe(Effect.map((xs) => xs.flat()))
      const wallMs = performance.now() - start
      const tokens = results.reduce((n, r) => n + r.tokens, 0)
      const cpuPerToken: Record<string, { server: number; engine: number }> = {}
      const cpuPerSecond: Record<string, number> = {}
      for (const s of servers) {
        const used = cpuBetween(before.get(s.name)!, cpuOfTree(s.pid))
        cpuPerToken[s.name] = { server: used.server / tokens, engine: used.engine / tokens }
        cpuPerSecond[s.name] = (used.server + used.engine) / (wallMs / 1000)
      }
      const phase: Phase = {
        mode,
        round,
        wallMs,
        tokens,
        turns: results.length * 2,
        followUps: results.reduce<Record<string, number>>((m, r) => ({ ...m, [r.reuse]: (m[r.reuse] ?? 0) + 1 }), {}),
        tokensPerSecond: tokens / (wallMs / 1000),
        turnsPerSecond: results.length * 2 / (wallMs / 1000),
        cpuPerToken,
        cpuPerSecond,
        loadavg: loadavg()
      }
      phases.push(phase)
      console.log(`round ${round} ${mode.padEnd(17)} ${phase.tokensPerSecond.toFixed(1)} tok/s, ${phase.turnsPerSecond.toFixed(2)} turns/s, ` +
        `follow-ups ${JSON.stringify(phase.followUps)}, load ${phase.loadavg.join(" ")}`)
    }
  }

  /** The process groups a mode runs on. */
  const groupsOf = (mode: Mode) => mode === "plain" ? ["plain"] : mode === "one-runner" ? ["solo"] : ["r1", "r2", "r3"]
  const f = (n: number) => n.toFixed(2)
  const r = (s: ReturnType<typeof summary>) => `${f(s.median)} [${f(s.min)}–${f(s.max)}]`
  const perMode = Object.fromEntries(modes.map((mode) => {
    const ps = phases.filter((p) => p.mode === mode)
    const sum = (p: Phase, role: "server" | "engine", names: ReadonlyArray<string>) => names.reduce((n, g) => n + p.cpuPerToken[g]![role], 0)
    const own = groupsOf(mode)
    const idle = ["plain", "solo", "r1", "r2", "r3"].filter((g) => !own.includes(g))
    return [mode, {
      tokensPerSecond: summary(ps.map((p) => p.tokensPerSecond)),
      turnsPerSecond: summary(ps.map((p) => p.turnsPerSecond)),
      serverCpuMsPerToken: summary(ps.map((p) => sum(p, "server", own))),
      engineCpuMsPerToken: summary(ps.map((p) => sum(p, "engine", own))),
      perProcessGroup: Object.fromEntries(own.map((g) => [g, {
        server: summary(ps.map((p) => p.cpuPerToken[g]!.server)),
        engine: summary(ps.map((p) => p.cpuPerToken[g]!.engine))
      }])),
      idleServersCpuMsPerToken: summary(ps.map((p) => sum(p, "server", idle) + sum(p, "engine", idle)))
    }]
  })) as Record<Mode, {
    tokensPerSecond: ReturnType<typeof summary>
    turnsPerSecond: ReturnType<typeof summary>
    serverCpuMsPerToken: ReturnType<typeof summary>
    engineCpuMsPerToken: ReturnType<typeof summary>
    perProcessGroup: Record<string, { server: ReturnType<typeof summary>; engine: ReturnType<typeof summary> }>
    idleServersCpuMsPerToken: ReturnType<typeof summary>
  }>
  const load = loadavg()
  console.log(`${storageKind} runner storage, plain and one runner at ${SOLO_THREADS} engine threads${SOLO_SLOTS === undefined ? "" : ` and ${SOLO_SLOTS} slots`}, three runners at 1 each, ${CLIENTS} clients × ${CONVERSATIONS} two-turn conversations, ${TOKENS} tokens per turn, ${ROUNDS} rounds, ${Os.cpus().length} CPUs, load ${load.join(" ")}`)
  console.log("medians [range]      tok/s                  turns/s              server CPU ms/token   engine CPU ms/token   other servers' CPU ms/token")
  for (const mode of modes) {
    const m = perMode[mode]
    console.log(`${mode.padEnd(17)}  ${[m.tokensPerSecond, m.turnsPerSecond, m.serverCpuMsPerToken, m.engineCpuMsPerToken, m.idleServersCpuMsPerToken].map((s) => r(s).padEnd(21)).join(" ")}`)
  }
  for (const mode of ["three-one-entry", "three-all-entries"] as const) {
    console.log(`${mode} per runner (server / engine CPU ms per token of the whole phase): ` +
      Object.entries(perMode[mode].perProcessGroup).map(([g, c]) => `${g} ${f(c.server.median)} / ${f(c.engine.median)}`).join(", "))
  }
  // Idle cost: a server's CPU per second while another mode ran (a cluster's heartbeats, shard-lock refreshes, load probes).
  const idlePerSecond = Object.fromEntries(servers.map((s) => [
    s.name,
    summary(phases.filter((p) => !groupsOf(p.mode).includes(s.name)).map((p) => p.cpuPerSecond[s.name]!))
  ]))
  console.log(`idle CPU ms per second (while other modes ran): ` + Object.entries(idlePerSecond).map(([g, x]) => `${g} ${r(x)}`).join(", "))
  const ratio = (a: Mode, b: Mode) =>
    summary(Array.from({ length: ROUNDS }, (_, round) => {
      const of = (m: Mode) => phases.find((p) => p.round === round && p.mode === m)!.tokensPerSecond
      return of(a) / of(b)
    }))
  const ratios = {
    threeAllOverOne: ratio("three-all-entries", "one-runner"),
    threeOneEntryOverOne: ratio("three-one-entry", "one-runner"),
    oneRunnerOverPlain: ratio("one-runner", "plain")
  }
  console.log(`tok/s per round: three (all entries) ÷ one runner ${r(ratios.threeAllOverOne)}; three (one entry) ÷ one runner ${r(ratios.threeOneEntryOverOne)}; one runner ÷ plain ${r(ratios.oneRunnerOverPlain)}`)
  writeResult(SOLO_SLOTS === undefined ? "cluster-scale" : `cluster-scale-slots${SOLO_SLOTS}`, { storage: storageKind, soloThreads: SOLO_THREADS, soloSlots: SOLO_SLOTS ?? null, clients: CLIENTS, conversations: CONVERSATIONS, rounds: ROUNDS, tokens: TOKENS, cpus: Os.cpus().length, loadavgAtEnd: load, perMode, idlePerSecond, ratios, phases })
})

Effect.runPromise(Effect.scoped(main)).then(() => process.exit(0), (error) => {
  console.error(error)
  process.exit(1)
})
