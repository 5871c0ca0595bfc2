/**
 * Per-token CPU across the three processes of a remote generation, on the `bench` model at 1
 * thread: a server process (the runtime and the RPC server on a private socket, as `nativegen
 * serve` runs them), its engine child, and this process as the RPC client streaming greedy
 * generations. Per round it reads each process's CPU time before and after (the child's main
 * thread apart from its native compute thread) and the decode rate the client sees; rounds
 * alternate with the plain in-process node-llama-cpp loop (bench/_inprocess.ts) on the same prompt.
 *
 * `TOKENS_PROFILE=<dir>`: the server, its child and this process write CPU profiles into that
 * directory (bench/_cpuprof.cjs). Settings: TOKENS_COUNT, TOKENS_ROUNDS, TOKENS_THREADS.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Readline from "node:readline"
import { promisify } from "node:util"
import { ensureModel } from "../fixtures/models.js"
import type { GenerateRequest } from "../src/domain/Inference.js"
import * as Runtime from "../src/layers/Runtime.js"
import * as Client from "../src/rpc/Client.js"
import * as Server from "../src/rpc/Server.js"
import { Provider } from "../src/services/Provider.js"
import * as Store from "../src/services/Store.js"
import { tokenArrivals } from "./_generation.js"

const TOKENS = Number(process.env.TOKENS_COUNT ?? 300)
const ROUNDS = Number(process.env.TOKENS_ROUNDS ?? 4)
const THREADS = Number(process.env.TOKENS_THREADS ?? 1)
const MiB = 1024 * 1024
const profileDir = process.env.TOKENS_PROFILE
const modelPath = ensureModel("bench")
const messages: GenerateRequest["messages"] = [{ role: "user", content: "tell me a long story about the sea" }]
const execFile = promisify(ChildProcess.execFile)
const loadavg = () => Fs.readFileSync("/proc/loadavg", "utf8").trim()
const ticks = 100
/** The environment that profiles a process (bench/_cpuprof.cjs: Node 20 refuses --cpu-prof in NODE_OPTIONS). */
const profiled = (dir: string) => ({
  NODE_OPTIONS: `--require ${Path.join(import.meta.dirname, "_cpuprof.cjs")}`,
  CPU_PROFILE_DIR: dir
})

/** CPU ms of a process (or one of its threads) from /proc. */
const cpuOf = (pid: number, tid?: number): number => {
  const stat = Fs.readFileSync(tid === undefined ? `/proc/${pid}/stat` : `/proc/${pid}/task/${tid}/stat`, "utf8")
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / ticks
}
const selfCpu = () => {
  const u = process.cpuUsage()
  return (u.user + u.system) / 1000
}

const serve = (socketPath: string, storeRoot: string) =>
  Effect.gen(function*() {
    const provider = yield* Provider
    const readiness = yield* provider.readiness
    console.log(`ready ${process.pid} ${readiness.engine.pid}`)
    return yield* Effect.never
  }).pipe(
    Effect.provide(
      Server.layer({ ...Server.defaults, socketPath }).pipe(Layer.provideMerge(
        Runtime.layerWithModels({ generation: modelPath, decision: ensureModel("decision") }, {
          worker: {
            child: { backend: "cpu", threads: THREADS, batchSize: 512 },
            stopTimeout: Duration.seconds(5),
            childEnv: profileDir === undefined ? {} : profiled(profileDir)
          },
          admission: { contextCap: { generation: 2048, decision: 1024 }, workspaceReservationBytes: 64 * MiB }
        })
      ), Layer.provideMerge(Store.layer.pipe(Layer.provide(Store.StoreConfig.layer({ root: storeRoot, trustSeedKey: false })))))
    )
  )

/** One streamed generation: ms per decode token after the first, and tokens. */
const generation = Effect.gen(function*() {
  const provider = yield* Provider
  const { arrivals, reads } = yield* tokenArrivals(provider.generate({ messages, maxTokens: TOKENS, sampling: { temperature: 0 } }))
  return {
    tokens: arrivals.length,
    reads,
    msPerToken: (arrivals[arrivals.length - 1]! - arrivals[0]!) / (arrivals.length - 1)
  }
})

const inProcess = (prompt: ReadonlyArray<number>) =>
  Effect.promise(async () => {
    const { stdout } = await execFile(process.execPath, [
      "--import", "tsx", Path.join(import.meta.dirname, "_inprocess.ts"),
      modelPath, JSON.stringify(prompt), String(TOKENS), String(THREADS), "1"
    ], { env: { ...process.env, UV_THREADPOOL_SIZE: "1", NODE_OPTIONS: "" }, encoding: "utf8" })
    const round = (JSON.parse(stdout.trim().split("\n").pop()!) as Array<{ tokens: number; ms: number }>)[0]!
    return round.ms / round.tokens
  })

const measure = (serverPid: number, childPid: number) =>
  Effect.gen(function*() {
    const provider = yield* Provider
    const { tokens: prompt } = yield* provider.tokenize({ messages })
    console.log(`load average at start: ${loadavg()}`)
    yield* generation
    const rows: Array<Record<string, number>> = []
    // The measured window on the monotonic clock (µs), as CPU profiles time their samples.
    const windowStart = process.hrtime.bigint() / 1000n
    for (let r = 0; r < ROUNDS; r++) {
      const plainFirst = r % 2 === 1
      const plainBefore = plainFirst ? yield* inProcess(prompt) : 0
      const before = { client: selfCpu(), server: cpuOf(serverPid), child: cpuOf(childPid), childMain: cpuOf(childPid, childPid) }
      const g = yield* generation
      const after = { client: selfCpu(), server: cpuOf(serverPid), child: cpuOf(childPid), childMain: cpuOf(childPid, childPid) }
      const plain = plainFirst ? plainBefore : yield* inProcess(prompt)
      const per = (k: keyof typeof before) => (after[k] - before[k]) / g.tokens
      const row = {
        tokens: g.tokens,
        clientReadsPerToken: g.reads / g.tokens,
        socketMsPerToken: g.msPerToken,
        inProcessMsPerToken: plain,
        ratio: plain / g.msPerToken,
        clientCpu: per("client"),
        serverCpu: per("server"),
        childMainCpu: per("childMain"),
        childOtherCpu: per("child") - per("childMain")
      }
      rows.push(row)
      console.log(`round ${r + 1}${plainFirst ? " (in-process first)" : ""}: ` +
        Object.entries(row).map(([k, v]) => `${k} ${Number.isInteger(v) ? v : v.toFixed(3)}`).join(", "))
    }
    console.log(`measured window (monotonic µs): ${windowStart} ${process.hrtime.bigint() / 1000n}`)
    const mean = (k: string) => rows.reduce((a, row) => a + row[k]!, 0) / rows.length
    console.log(`\nbench model, ${THREADS} thread(s), ${TOKENS} tokens greedy through the RPC socket, ${ROUNDS} rounds (means)`)
    for (const k of Object.keys(rows[0]!)) console.log(`  ${k.padEnd(22)} ${mean(k).toFixed(3)}`)
    console.log(`  host + child JS / native step ${((mean("serverCpu") + mean("childMainCpu")) / mean("childOtherCpu")).toFixed(3)}`)
    console.log(`load average at end: ${loadavg()}`)
  })

if (process.argv[2] === "serve") {
  NodeRuntime.runMain(serve(process.argv[3]!, process.argv[4]!))
} else {
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "nativegen-tokens-"))
  const socketPath = Path.join(dir, "s", "nativegen.sock")
  const server = ChildProcess.spawn(process.execPath, ["--import", "tsx", import.meta.filename, "serve", socketPath, Path.join(dir, "store")], {
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, UV_THREADPOOL_SIZE: "1", ...(profileDir === undefined ? {} : profiled(profileDir)) }
  })
  const ready = await new Promise<[number, number]>((resolve, reject) => {
    const lines = Readline.createInterface({ input: server.stdout! })
    lines.on("line", (line) => {
      const m = /^ready (\d+) (\d+)/.exec(line)
      if (m !== null) resolve([Number(m[1]), Number(m[2])])
    })
    server.once("exit", (code) => reject(new Error(`server exited with ${code}`)))
  })
  const stopped = new Promise((resolve) => server.once("exit", resolve))
  try {
    await Effect.runPromise(measure(...ready).pipe(Effect.provide(Client.layer({ socketPath }))))
  } finally {
    server.kill("SIGTERM")
    await stopped
    Fs.rmSync(dir, { recursive: true, force: true })
  }
}
