/**
 * What a hop through the cluster costs: two `nativegen serve --cluster` runners on this machine
 * (Unix sockets by default, BENCH_CLUSTER_TRANSPORT=tcp for loopback TCP with noDelay), one
 * SQLite runner storage, qwen-chat at 1 thread. A client on runner 1's public socket runs
 * two-turn conversations, some owned by runner 1 (served locally, no hop) and some by runner 2
 * (forwarded over the cluster and streamed back), alternating local and remote in each round.
 *
 * Per follow-up turn (a continuation: the KV is on the owner), measured at the client: the time
 * to the first Text chunk, and the whole stream; and from the Done chunk, the owner's own
 * first-token and total times. The hop's cost is what the client waited beyond the owner's
 * times, per request (at the first token) and per generated token (over the stream); reported
 * for local and remote side by side, with the ratio of follow-up times to first token (remote ÷
 * local; issue 20's target: at most 1.1).
 *
 * BENCH_CLUSTER_ROUNDS (default 5), BENCH_CLUSTER_TOKENS (generated per turn, default 32).
 */
import * as Chunk from "effect/Chunk"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schedule from "effect/Schedule"
import * as Stream from "effect/Stream"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { projectRoot } from "../fixtures/models.js"
import * as Runner from "../src/cluster/Runner.js"
import * as Status from "../src/cluster/Status.js"
import type { ChatMessage, GenerateChunk, GenerateRequest } from "../src/domain/Inference.js"
import * as Client from "../src/rpc/Client.js"
import { Provider } from "../src/services/Provider.js"

const ROUNDS = Number(process.env.BENCH_CLUSTER_ROUNDS ?? 5)
const TOKENS = Number(process.env.BENCH_CLUSTER_TOKENS ?? 32)
const TCP = process.env.BENCH_CLUSTER_TRANSPORT === "tcp"
const SHARDS = 12

/** `nativegen serve --cluster` in its own home and process group, until the scope closes. */
const runner = (dir: string, name: string, address: string, storage: string) =>
  Effect.gen(function*() {
    const home = Path.join(dir, name)
    Fs.mkdirSync(Path.join(home, "run"), { recursive: true, mode: 0o700 })
    let output = ""
    let exited = false
    const child = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const env: NodeJS.ProcessEnv = {}
        for (const [k, v] of Object.entries(process.env)) if (!k.startsWith("NATIVEGEN_") && !k.startsWith("XDG_")) env[k] = v
        const child = ChildProcess.spawn(process.execPath, [Path.join(projectRoot, "bin", "nativegen.js"), "serve"], {
          cwd: projectRoot,
          env: {
            ...env,
            HOME: home,
            XDG_DATA_HOME: Path.join(home, "data"),
            XDG_RUNTIME_DIR: Path.join(home, "run"),
            NATIVEGEN_THREADS: "1",
            NATIVEGEN_ADMISSION_GENERATION_CONTEXT_CAP: "2048",
            NATIVEGEN_ADMISSION_DECISION_CONTEXT_CAP: "512",
            NATIVEGEN_CLUSTER: address,
            NATIVEGEN_CLUSTER_STORAGE: storage,
            NATIVEGEN_CLUSTER_SHARDS: String(SHARDS)
          },
          stdio: ["ignore", "pipe", "pipe"],
          detached: true
        })
        child.stdout.setEncoding("utf8").on("data", (s: string) => (output += s))
        child.stderr.setEncoding("utf8").on("data", (s: string) => (output += s))
        child.once("close", () => (exited = true))
        return child
      }),
      (child) =>
        Effect.gen(function*() {
          const exited = new Promise<void>((resolve) => child.once("close", () => resolve()))
          try {
            process.kill(-child.pid!, "SIGINT")
          } catch {}
          yield* Effect.promise(() => exited).pipe(
            Effect.timeout("20 seconds"),
            Effect.catchAll(() => Effect.sync(() => process.kill(-child.pid!, "SIGKILL")))
          )
        })
    )
    yield* Effect.suspend(() =>
      /ready \(engine 1/.test(output) ? Effect.void : exited ? Effect.die(new Error(`runner ${name} exited:\n${output}`)) : Effect.fail("not ready")
    ).pipe(
      Effect.retry(Schedule.spaced("200 millis").pipe(Schedule.upTo("240 seconds"))),
      Effect.orDieWith(() => new Error(`runner ${name} (pid ${child.pid}) not ready:\n${output}`))
    )
    const socket = Path.join(home, "run", "nativegen", "nativegen.sock")
    const stored = TCP ? address : `${address}:0`
    return { name, socket, stored }
  })

interface Sample {
  readonly where: "local" | "remote"
  /** Client: submit to the first Text chunk; owner: the Done chunk's firstTokenMillis. */
  readonly clientFirst: number
  readonly ownerFirst: number
  readonly clientTotal: number
  readonly ownerTotal: number
  readonly tokens: number
}

const timedTurn = (provider: Provider["Type"], request: GenerateRequest) =>
  Effect.gen(function*() {
    const start = performance.now()
    let first: number | undefined
    const chunks = Chunk.toArray(yield* Stream.runCollect(provider.generate(request).pipe(
      Stream.tap((c) => Effect.sync(() => {
        if (first === undefined && c._tag === "Text") first = performance.now()
      }))
    )))
    const end = performance.now()
    const done = chunks.at(-1)
    if (done?._tag !== "Done") throw new Error("no Done chunk")
    return { chunks, done, first: (first ?? end) - start, total: end - start }
  })

const answerOf = (chunks: ReadonlyArray<GenerateChunk>) =>
  chunks.map((c) => (c._tag === "Text" && c.channel === "answer" ? c.text : "")).join("")

const settings = { maxTokens: TOKENS, sampling: { temperature: 0 }, thinking: false } as const

const followUp = (provider: Provider["Type"], conversation: string, where: Sample["where"], round: number) =>
  Effect.gen(function*() {
    const user1: ChatMessage = { role: "user", content: `round ${round}: tell me about the sea and the ships on it` }
    const one = yield* timedTurn(provider, { messages: [user1], conversation, ...settings })
    const two = yield* timedTurn(provider, {
      messages: [user1, { role: "assistant", content: answerOf(one.chunks) }, { role: "user", content: "and the harbor?" }],
      conversation,
      checkpoint: one.done.checkpoint!,
      ...settings
    })
    if (two.done.usage.reuse !== "continuation") throw new Error(`${where} follow-up reuse ${two.done.usage.reuse}`)
    const sample: Sample = {
      where,
      clientFirst: two.first,
      ownerFirst: two.done.timings.firstTokenMillis,
      clientTotal: two.total,
      ownerTotal: two.done.timings.totalMillis,
      tokens: two.done.usage.generatedTokens
    }
    return sample
  })

const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length === 0 ? NaN : s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2
}

const main = Effect.gen(function*() {
  const dir = yield* Effect.acquireRelease(
    Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "ngb-"))),
    (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
  )
  const storage = Path.join(dir, "cluster.db")
  const addresses = TCP ? ["127.0.0.1:34531", "127.0.0.1:34532"] : [Path.join(dir, "r1.sock"), Path.join(dir, "r2.sock")]
  const [r1, r2] = yield* Effect.all([runner(dir, "r1", addresses[0]!, storage), runner(dir, "r2", addresses[1]!, storage)], {
    concurrency: "unbounded"
  })
  const provider = Context.get(yield* Layer.build(Client.layer({ socketPath: r1.socket })), Provider)
  const view = yield* Layer.build(Runner.layerClientOnly({ storage: { _tag: "Sqlite", file: storage }, shards: SHARDS }))
  // Settled: both runners hold shards, unchanged over two reads 1.5 s apart.
  const snapshot = yield* Effect.gen(function*() {
    const read = Effect.flatMap(Status.snapshot, (s) => {
      const owners = new Set(s.shards?.values() ?? [])
      return s.shards?.size === SHARDS && owners.has(r1.stored) && owners.has(r2.stored) ? Effect.succeed(s) : Effect.fail("not settled")
    })
    const a = yield* Effect.retry(read, Schedule.spaced("250 millis").pipe(Schedule.upTo("60 seconds")))
    yield* Effect.sleep("1500 millis")
    const b = yield* read
    return JSON.stringify([...a.shards!].sort()) === JSON.stringify([...b.shards!].sort()) ? b : yield* Effect.fail("moved")
  }).pipe(Effect.retry({ times: 10 }), Effect.orDie, Effect.provide(view))
  const pick = (owner: string, round: number, where: string) =>
    Effect.gen(function*() {
      for (let i = 0; ; i++) {
        const id = `bench-${where}-${round}-${i}`
        if ((yield* Status.ownerOf(snapshot, id)) === owner) return id
      }
    }).pipe(Effect.provide(view))

  const samples: Array<Sample> = []
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? (["local", "remote"] as const) : (["remote", "local"] as const)
    for (const where of order) {
      const id = yield* pick(where === "local" ? r1.stored : r2.stored, round, where)
      samples.push(yield* followUp(provider, id, where, round))
    }
  }

  const of = (where: Sample["where"]) => samples.filter((s) => s.where === where)
  const row = (where: Sample["where"]) => {
    const s = of(where)
    return {
      first: median(s.map((x) => x.clientFirst)),
      ownerFirst: median(s.map((x) => x.ownerFirst)),
      hopFirst: median(s.map((x) => x.clientFirst - x.ownerFirst)),
      perToken: median(s.map((x) => (x.clientTotal - x.ownerTotal) / Math.max(1, x.tokens))),
      decode: median(s.map((x) => (x.clientTotal - x.clientFirst) / Math.max(1, x.tokens - 1)))
    }
  }
  const local = row("local")
  const remote = row("remote")
  const f = (n: number) => n.toFixed(2)
  console.log(`transport ${TCP ? "tcp (noDelay)" : "unix"}, ${ROUNDS} rounds, ${TOKENS} tokens per turn, load ${Os.loadavg().map((l) => l.toFixed(2)).join(" ")}`)
  console.log("medians, ms       first token  owner's first  hop at first  hop per token  client ms/token")
  for (const [name, r] of [["local", local], ["remote", remote]] as const) {
    console.log(`${name.padEnd(16)}  ${f(r.first).padStart(11)}  ${f(r.ownerFirst).padStart(13)}  ${f(r.hopFirst).padStart(12)}  ${f(r.perToken).padStart(13)}  ${f(r.decode).padStart(15)}`)
  }
  console.log(`follow-up first token, remote ÷ local: ${f(remote.first / local.first)} (target ≤ 1.1)`)
  console.log(`added by the hop: ${f(remote.hopFirst - local.hopFirst)} ms at the first token, ${f(remote.perToken - local.perToken)} ms per token`)
})

Effect.runPromise(Effect.scoped(main)).then(() => process.exit(0), (error) => {
  console.error(error)
  process.exit(1)
})
