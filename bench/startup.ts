/**
 * Start-up, the repository's compiled build (bin/sources-build.js: what `bin/nativegen.js` and the
 * engine children run) against the same sources through tsx's loader (how both started before),
 * alternating A/B in one run; medians, ranges and the load average:
 *   1. `nativegen --version` from a new process (wall clock);
 *   2. `nativegen chat -n 1` against a running server (wall clock from spawn to exit);
 *   3. an engine child: spawn -> Hello answered;
 *   4. a NativeWorker cold start to ready on the `bench` model (spawn, hello, load, warm).
 * `ROUNDS` (environment, default 5) sets the rounds.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import { createRequire } from "node:module"
import * as Os from "node:os"
import * as Path from "node:path"
import { pathToFileURL } from "node:url"
import { currentBuild } from "../bin/sources-build.js"
import { ensureModel, projectRoot } from "../fixtures/models.js"
import * as EngineChild from "../src/native/ChildProcess.js"
import { defaultChildSettings } from "../src/native/ChildSettings.js"
import * as NativeWorker from "../src/services/NativeWorker.js"

const ROUNDS = Number(process.env.ROUNDS ?? 5)
const tsx = pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href
const bin = Path.join(projectRoot, "bin", "nativegen.js")
const mainTs = Path.join(projectRoot, "src", "cli", "main.ts")
const work = Fs.mkdtempSync(Path.join(Os.tmpdir(), "ng-startup-"))

/** The two ways to run the command line. */
const cli = {
  compiled: (args: ReadonlyArray<string>) => [bin, ...args],
  tsx: (args: ReadonlyArray<string>) => ["--import", tsx, mainTs, ...args]
} as const
type Variant = keyof typeof cli
const variants: ReadonlyArray<Variant> = ["compiled", "tsx"]

/** An engine child through tsx, for the comparison: NativeWorker's `execPath` replaced by a script that ignores the compiled entry it is given. */
const tsxChild = Path.join(work, "tsx-child.sh")
Fs.writeFileSync(
  tsxChild,
  `#!/bin/sh\nexec ${JSON.stringify(process.execPath)} --import ${JSON.stringify(tsx)} ${JSON.stringify(Path.join(projectRoot, "src", "native", "child.ts"))}\n`,
  { mode: 0o755 }
)
const execPathOf = (variant: Variant) => (variant === "tsx" ? tsxChild : undefined)

const home = Path.join(work, "home")
const env: NodeJS.ProcessEnv = {
  ...process.env,
  XDG_DATA_HOME: Path.join(home, "data"),
  XDG_CONFIG_HOME: Path.join(home, "config"),
  XDG_RUNTIME_DIR: Path.join(home, "run"),
  NATIVEGEN_THREADS: "1",
  NATIVEGEN_ADMISSION_GENERATION_CONTEXT_CAP: "1024",
  NATIVEGEN_ADMISSION_DECISION_CONTEXT_CAP: "512",
  NO_COLOR: "1"
}
Fs.mkdirSync(env.XDG_RUNTIME_DIR!, { recursive: true, mode: 0o700 })
const socket = Path.join(env.XDG_RUNTIME_DIR!, "nativegen", "nativegen.sock")

/** Wall clock of one command-line run, which must succeed. */
const timeCli = (variant: Variant, args: ReadonlyArray<string>): number => {
  const start = performance.now()
  const result = ChildProcess.spawnSync(process.execPath, cli[variant](args), { env, encoding: "utf8" })
  const elapsed = performance.now() - start
  if (result.status !== 0) throw new Error(`nativegen ${args.join(" ")} (${variant}) failed: ${result.stderr}`)
  return elapsed
}

/** A server for the chat figure; the returned stop sends SIGINT and waits for its exit. */
const startServer = () =>
  new Promise<() => Promise<void>>((resolve, reject) => {
    const server = ChildProcess.spawn(process.execPath, [bin, "serve"], { env, stdio: ["ignore", "pipe", "pipe"], detached: true })
    const exited = new Promise<void>((done) => server.once("exit", () => done()))
    let output = ""
    const stop = () => {
      try {
        process.kill(-server.pid!, "SIGINT")
      } catch {
        // Gone already.
      }
      return exited
    }
    const onData = (chunk: string) => {
      output += chunk
      if (/ready \(engine 1/.test(output)) resolve(stop)
    }
    server.stdout.setEncoding("utf8").on("data", onData)
    server.stderr.setEncoding("utf8").on("data", onData)
    void exited.then(() => reject(new Error(`the server exited before it was ready:\n${output}`)))
  })

const spawnToHello = (variant: Variant) =>
  Effect.scoped(Effect.gen(function*() {
    const start = performance.now()
    const child = yield* EngineChild.spawn({ settings: defaultChildSettings, execPath: execPathOf(variant) })
    yield* child.client.Hello()
    return performance.now() - start
  }))

const coldStart = (variant: Variant) =>
  Effect.scoped(Effect.gen(function*() {
    const config = NativeWorker.NativeWorkerConfig.layer({
      child: { backend: "cpu", threads: 1, batchSize: 512 },
      models: { generation: { modelPath: ensureModel("bench"), contextSize: 1024 } },
      stopTimeout: Duration.seconds(5),
      execPath: execPathOf(variant)
    })
    const start = performance.now()
    yield* Layer.build(Layer.fresh(NativeWorker.layer).pipe(Layer.provide(NativeWorker.hooksNoop), Layer.provide(config)))
    return performance.now() - start
  }))

const median = (xs: ReadonlyArray<number>) => {
  const sorted = [...xs].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}

type Figure = Record<Variant, Array<number>>
const figures = {
  "nativegen --version": { compiled: [], tsx: [] } as Figure,
  "nativegen chat -n 1 (running server)": { compiled: [], tsx: [] } as Figure,
  "engine child spawn -> Hello": { compiled: [], tsx: [] } as Figure,
  "cold start to ready (bench model)": { compiled: [], tsx: [] } as Figure
}

const program = Effect.gen(function*() {
  const load = [Os.loadavg()[0]!]
  // Built before timing (a start after a source change builds once, then every start reuses it).
  yield* Effect.promise(() => currentBuild())
  ensureModel("bench")
  const stop = yield* Effect.promise(() => startServer())
  yield* Effect.addFinalizer(() => Effect.promise(stop))
  const chat = ["chat", "-n", "1", "-t", "0", "--socket", socket, "hi"]
  // One unmeasured run of each: the server's first request and the file cache.
  for (const variant of variants) timeCli(variant, chat)
  for (let round = 0; round < ROUNDS; round++) {
    // Alternate which variant goes first.
    const order = round % 2 === 0 ? variants : [...variants].reverse()
    for (const variant of order) {
      figures["nativegen --version"][variant].push(timeCli(variant, ["--version"]))
      figures["nativegen chat -n 1 (running server)"][variant].push(timeCli(variant, chat))
      figures["engine child spawn -> Hello"][variant].push(yield* spawnToHello(variant))
      figures["cold start to ready (bench model)"][variant].push(yield* coldStart(variant))
    }
    load.push(Os.loadavg()[0]!)
    console.log(`round ${round + 1}/${ROUNDS} done (load ${Os.loadavg().map((l) => l.toFixed(2)).join(" ")})`)
  }
  console.log(`\n${ROUNDS} rounds, load average (1 min) ${Math.min(...load).toFixed(2)}-${Math.max(...load).toFixed(2)}`)
  console.log("| figure | compiled (median, range) | tsx loader (median, range) | ratio |")
  console.log("|---|---|---|---|")
  for (const [name, figure] of Object.entries(figures)) {
    const cell = (xs: ReadonlyArray<number>) => `${median(xs).toFixed(0)} ms (${Math.min(...xs).toFixed(0)}-${Math.max(...xs).toFixed(0)})`
    console.log(`| ${name} | ${cell(figure.compiled)} | ${cell(figure.tsx)} | ${(median(figure.compiled) / median(figure.tsx)).toFixed(2)} |`)
  }
})

Effect.runPromise(Effect.scoped(program))
  .catch((e) => {
    console.error(e)
    process.exitCode = 1
  })
  .finally(() => Fs.rmSync(work, { recursive: true, force: true }))
