/**
 * `npm run bench enginegap`: where a plain in-process node-llama-cpp loop (bench/_inprocess.ts) and
 * llama.cpp's own server (bench/peer/LlamaServer.ts, built from the same llama.cpp source) spend
 * their CPU, on the same model, prompt tokens, threads, context, batch and greedy settings (both
 * resolve to the same llama_context: n_batch = n_ubatch = 512, flash attention auto -> enabled,
 * f16 KV, mmap, kv_unified false). Decode (GAP_MODE=decode, the default): GAP_TOKENS tokens after a
 * short prompt, streamed over HTTP by the server as the peer benchmark asks it. Prefill
 * (GAP_MODE=prefill): a prompt of about GAP_PREFILL_WORDS tokens then one token, in-process both in
 * the engine's 128-token native calls (GAP_PREFILL_CHUNK) and in 512-token batches as the server.
 * The sides alternate in rotated order each round. For each side it reads the CPU time and the
 * voluntary context switches (hand-offs between threads) of every thread of the process
 * (/proc/<pid>/task/<tid>/{schedstat,status}) around the measured work alone (the in-process loop
 * waits for a line on stdin once loaded), and with GAP_PERF (default on) samples that window with
 * `perf record -g` (attached to the process, enabled and disabled through perf's control fifo) and
 * splits the samples into: ggml's compute kernels, graph building and scheduling (libllama,
 * ggml-base), sampling over the vocabulary, libc, the kernel, and the rest (Node/V8/libuv and N-API
 * for the in-process loop; HTTP, JSON and the tokenizer for the server), in CPU ms per token. It
 * names the library each side runs: the libggml-cpu variant the in-process loop mapped, and the
 * server's build (bin/build.json). Greedy tokens are checked to be identical on every side.
 *
 * Prints a table and writes bench/results/enginegap-<mode>-<threads>t.json. Environment:
 * GAP_MODE (decode), GAP_TOKENS (256), GAP_ROUNDS (2), GAP_THREADS (1), GAP_PERF ("0": no perf
 * pass), GAP_CONTEXT (2048), GAP_PREFILL_WORDS (1000), GAP_PREFILL_CHUNK (128), BENCH_MODEL
 * (qwen-bench). Nice it: `nice -n 5 npm run bench enginegap`. Findings: docs/decisions.md,
 * "The engine gap".
 */
import * as Effect from "effect/Effect"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Readline from "node:readline"
import { ensureModel, projectRoot } from "../fixtures/models.js"
import { benchModel } from "./_target.js"
import * as LlamaServer from "./peer/LlamaServer.js"
import { chatMl, userPrompt } from "./peer/Prompts.js"

const TOKENS = Number(process.env.GAP_TOKENS ?? 256)
const ROUNDS = Number(process.env.GAP_ROUNDS ?? 2)
const THREADS = Number(process.env.GAP_THREADS ?? 1)
const PERF = process.env.GAP_PERF !== "0" && ChildProcess.spawnSync("perf", ["--version"]).status === 0
const CONTEXT = Number(process.env.GAP_CONTEXT ?? 2048)
/** decode: GAP_TOKENS greedy tokens after a short prompt; prefill: a prompt of about GAP_PREFILL_WORDS tokens, then one token. */
const MODE = process.env.GAP_MODE === "prefill" ? "prefill" : "decode"
const PREFILL_WORDS = Number(process.env.GAP_PREFILL_WORDS ?? 1000)
/** The engine's prefill call size on the CPU (ChildSettings.defaultPrefillChunk). */
const PREFILL_CHUNK = Number(process.env.GAP_PREFILL_CHUNK ?? 128)
const BATCH = 512
const PERF_HZ = 1999
const modelName = benchModel("qwen-bench")
const modelPath = ensureModel(modelName)
const loadavg = () => Fs.readFileSync("/proc/loadavg", "utf8").trim().split(" ").slice(0, 3).join(" ")
const work = Fs.mkdtempSync(Path.join(Os.tmpdir(), "enginegap-"))

// ---------------------------------------------------------------------------------------------
// CPU time of a process: every thread's on-CPU nanoseconds (/proc/<pid>/task/<tid>/schedstat)
// ---------------------------------------------------------------------------------------------

/** CPU ms of every thread of `pid` (threads that ended since are lost: none end in a decode). */
const cpuMs = (pid: number): number => {
  let ns = 0
  for (const tid of Fs.readdirSync(`/proc/${pid}/task`)) {
    try {
      ns += Number(Fs.readFileSync(`/proc/${pid}/task/${tid}/schedstat`, "utf8").split(" ")[0])
    } catch {
      // the thread ended between the listing and the read
    }
  }
  return ns / 1e6
}

/** Voluntary context switches of every thread of `pid`: a thread waiting for another (a hand-off), not preempted. */
const switches = (pid: number): number => {
  let n = 0
  for (const tid of Fs.readdirSync(`/proc/${pid}/task`)) {
    try {
      for (const m of Fs.readFileSync(`/proc/${pid}/task/${tid}/status`, "utf8").matchAll(/^voluntary_ctxt_switches:\s+(\d+)/gm)) n += Number(m[1])
    } catch {
      // the thread ended between the listing and the read
    }
  }
  return n
}

// ---------------------------------------------------------------------------------------------
// perf: attached to a process, recording only between enable and disable
// ---------------------------------------------------------------------------------------------

interface Recording {
  readonly enable: () => Promise<void>
  /** Disables, stops perf and waits for its data file. */
  readonly finish: () => Promise<string>
}

const perfCommand = (fifo: string, command: "enable" | "disable") =>
  new Promise<void>((resolve, reject) => {
    const ack = Fs.createReadStream(`${fifo}.ack`)
    ack.once("data", () => {
      ack.destroy()
      resolve()
    })
    ack.once("error", reject)
    Fs.writeFileSync(`${fifo}.ctl`, `${command}\n`)
  })

const record = (pid: number, name: string): Recording => {
  const fifo = Path.join(work, name)
  for (const end of ["ctl", "ack"]) ChildProcess.execFileSync("mkfifo", [`${fifo}.${end}`])
  const data = `${fifo}.data`
  const perf = ChildProcess.spawn("nice", [
    "-n", "5", "perf", "record", "-q", "-F", String(PERF_HZ), "-g", "-D", "-1",
    "--control", `fifo:${fifo}.ctl,${fifo}.ack`, "-p", String(pid), "-o", data
  ], { stdio: ["ignore", "ignore", "inherit"] })
  const exited = new Promise<void>((resolve) => perf.once("close", () => resolve()))
  return {
    enable: () => perfCommand(fifo, "enable"),
    finish: async () => {
      await perfCommand(fifo, "disable")
      perf.kill("SIGINT")
      await exited
      return data
    }
  }
}

/** Where a sample's CPU went. */
const categories = ["ggml kernels", "graph & scheduling", "sampling", "libc", "kernel", "rest"] as const
type Category = typeof categories[number]

const categoryOf = (dso: string, symbol: string): Category => {
  if (dso.startsWith("[kernel") || symbol.startsWith("[k]")) return "kernel"
  const sym = symbol.replace(/^\[[.k]\]\s*/, "")
  if (/sampler|setTokenCandidates|SampleToken|llama_token_data|top_k|__introsort|__adjust_heap|__insertion_sort|partial_sort|nth_element/.test(sym)) return "sampling"
  if (/^libggml-cpu/.test(dso)) return "ggml kernels"
  if (/^(ggml_compute_forward|ggml_vec_|ggml_gemv|ggml_gemm|ggml_graph_compute|ggml_barrier|ggml_cpu_|ggml_fp16_to|ggml_fp32_to|ggml_cpu_fp|quantize_row|dequantize_row|ggml_v_|ggml_compute_|simd_gemm|.*tinyBLAS|.*llamafile|ggml_thread|ggml_cpu_extra)/.test(sym)) return "ggml kernels"
  if (/^libllama|^libggml/.test(dso)) return "graph & scheduling"
  if (/^(llama_|llm_|ggml_|gguf_)/.test(sym) || /^(llama_|llm_)/.test(sym.replace(/^.*?::/, ""))) return "graph & scheduling"
  if (/^libc[.-]|^libm[.-]|^ld-linux/.test(dso)) return "libc"
  return "rest"
}

interface Profile {
  readonly share: Record<Category, number>
  /** The "rest" by library (node, JIT code, the N-API addon, libstdc++ ...). */
  readonly rest: Record<string, number>
  /** The symbols with the most self time: share of the samples, where it is. */
  readonly top: ReadonlyArray<{ readonly share: number; readonly dso: string; readonly symbol: string; readonly category: Category }>
  readonly samples: number
}

const report = (data: string): Profile => {
  const out = ChildProcess.execFileSync("perf", [
    "report", "-i", data, "--stdio", "--no-children", "-g", "none", "--sort", "dso,sym", "--percent-limit", "0"
  ], { encoding: "utf8", maxBuffer: 256 * 1024 * 1024, stdio: ["ignore", "pipe", "ignore"] })
  const share = Object.fromEntries(categories.map((c) => [c, 0])) as Record<Category, number>
  const top: Array<Profile["top"][number]> = []
  const rest: Record<string, number> = {}
  let samples = 0
  for (const line of out.split("\n")) {
    const count = /^# Samples: ([\d.]+)([KM]?)/.exec(line)
    if (count !== null) samples += Number(count[1]) * (count[2] === "K" ? 1e3 : count[2] === "M" ? 1e6 : 1)
    const m = /^\s+([\d.]+)%\s+(\S+)\s+(\[[.k]\]\s+.*)$/.exec(line)
    if (m === null) continue
    const [, percent, dso, symbol] = m
    const category = categoryOf(dso!, symbol!.startsWith("[k]") ? symbol! : symbol!.slice(4))
    share[category] += Number(percent) / 100
    if (category === "rest") {
      const library = dso!.startsWith("perf-") ? "JIT (V8)" : dso!
      rest[library] = (rest[library] ?? 0) + Number(percent) / 100
    }
    top.push({ share: Number(percent) / 100, dso: dso!, symbol: symbol!.replace(/^\[[.k]\]\s*/, "").trim(), category })
  }
  return { share, rest, top: top.sort((a, b) => b.share - a.share).slice(0, 15), samples }
}

// ---------------------------------------------------------------------------------------------
// The sides
// ---------------------------------------------------------------------------------------------

interface Measured {
  /** Units of work counted by the side's own timing and their wall ms: decoded tokens after the first, or prompt tokens. */
  readonly units: number
  readonly ms: number
  /** CPU ms of the whole process over the window, and the units it is divided by (decode: every decoded token). */
  readonly cpuMs: number
  readonly cpuUnits: number
  /** Voluntary context switches of the process over the window. */
  readonly switches: number
  readonly generated: ReadonlyArray<number>
  readonly profile: Profile | undefined
}

/** The libggml-cpu variant (and ggml/llama libraries) a process has mapped. */
const mappedLibraries = (pid: number): ReadonlyArray<string> =>
  Array.from(new Set(
    Fs.readFileSync(`/proc/${pid}/maps`, "utf8").split("\n")
      .map((l) => l.split(/\s+/)[5] ?? "")
      .filter((f) => /lib(ggml|llama)[^/]*\.so/.test(f))
      .map((f) => Path.basename(f))
  )).sort()

/**
 * One in-process run in its own process (bench/_inprocess.ts with its handshake): decode, or
 * prefill (the prompt, then one token) in native calls of `chunk` tokens (0: one evaluate, split
 * into 512-token batches by node-llama-cpp, as llama-server splits it).
 */
const inProcess = (chunk: number, libraries: Array<string>) => async (prompt: ReadonlyArray<number>, round: number): Promise<Measured> => {
  const child = ChildProcess.spawn(process.execPath, [
    ...(PERF ? ["--perf-basic-prof-only-functions"] : []),
    "--import", "tsx", Path.join(import.meta.dirname, "_inprocess.ts"),
    modelPath, JSON.stringify(prompt), String(MODE === "decode" ? TOKENS + 1 : 1), String(THREADS), "1"
  ], {
    env: { ...process.env, UV_THREADPOOL_SIZE: "1", INPROCESS_HANDSHAKE: "1", INPROCESS_CONTEXT: String(CONTEXT), INPROCESS_PREFILL_CHUNK: String(chunk) },
    stdio: ["pipe", "pipe", "inherit"]
  })
  const lines = Readline.createInterface({ input: child.stdout! })[Symbol.asyncIterator]()
  const ready = await lines.next()
  if (ready.value !== "ready") throw new Error(`the in-process loop said ${JSON.stringify(ready.value)}`)
  if (libraries.length === 0) libraries.push(...mappedLibraries(child.pid!))
  const perf = PERF ? record(child.pid!, `inprocess-${chunk}-${round}`) : undefined
  await perf?.enable()
  const before = cpuMs(child.pid!)
  const switchesBefore = switches(child.pid!)
  const exited = new Promise<void>((resolve) => child.once("close", () => resolve()))
  child.stdin!.write("go\n")
  const result = await lines.next()
  const after = cpuMs(child.pid!)
  const switchesAfter = switches(child.pid!)
  const data = await perf?.finish()
  child.stdin!.end("exit\n")
  await exited
  const [r] = JSON.parse(String(result.value)) as Array<{ tokens: number; ms: number; firstTokenMs: number; generated: Array<number> }>
  const measured = MODE === "decode"
    ? { units: r!.tokens, ms: r!.ms, cpuUnits: r!.tokens + 1 }
    : { units: prompt.length, ms: r!.firstTokenMs, cpuUnits: prompt.length }
  return { ...measured, cpuMs: after - before, switches: switchesAfter - switchesBefore, generated: r!.generated, profile: data === undefined ? undefined : report(data) }
}

interface Timings {
  readonly prompt_n: number
  readonly prompt_ms: number
  readonly predicted_n: number
  readonly predicted_ms: number
}

/** One streamed greedy completion of the prompt tokens from llama-server (prefill: one token). */
const server = (url: string, pid: number) => async (prompt: ReadonlyArray<number>, round: number): Promise<Measured> => {
  const perf = PERF ? record(pid, `server-${round}`) : undefined
  await perf?.enable()
  const before = cpuMs(pid)
  const switchesBefore = switches(pid)
  const response = await fetch(`${url}/completion`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ prompt, n_predict: MODE === "decode" ? TOKENS + 1 : 1, temperature: 0, stream: true, cache_prompt: false, return_tokens: true })
  })
  const text = await response.text()
  const after = cpuMs(pid)
  const switchesAfter = switches(pid)
  const data = await perf?.finish()
  const generated: Array<number> = []
  let timings: Timings | undefined
  for (const line of text.split("\n")) {
    if (!line.startsWith("data: ")) continue
    const event = JSON.parse(line.slice(6)) as { tokens?: Array<number>; stop?: boolean; timings?: Timings }
    generated.push(...(event.tokens ?? []))
    if (event.stop === true) timings = event.timings
  }
  if (timings === undefined) throw new Error(`no final event from llama-server: ${text.slice(-500)}`)
  // predicted_n counts the first token too; its time is the prompt's.
  const measured = MODE === "decode"
    ? { units: timings.predicted_n - 1, ms: timings.predicted_ms, cpuUnits: timings.predicted_n }
    : { units: timings.prompt_n, ms: timings.prompt_ms, cpuUnits: timings.prompt_n }
  return { ...measured, cpuMs: after - before, switches: switchesAfter - switchesBefore, generated, profile: data === undefined ? undefined : report(data) }
}

// ---------------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------------

const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length === 0 ? Number.NaN : s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2
}

type Run = (prompt: ReadonlyArray<number>, round: number) => Promise<Measured>

const program = Effect.scoped(Effect.gen(function*() {
  const built = yield* LlamaServer.ensureBuilt(projectRoot)
  const running = yield* LlamaServer.start(built.binary, { model: modelPath, threads: THREADS, contextSize: CONTEXT, batchSize: BATCH, parallel: 1 })
  return yield* Effect.promise(async () => {
    const words = MODE === "decode" ? 30 : PREFILL_WORDS
    const tokenized = await fetch(`${running.url}/tokenize`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ content: chatMl(userPrompt(`enginegap/${MODE}`, words)), add_special: false, parse_special: true })
    })
    const prompt = ((await tokenized.json()) as { tokens: Array<number> }).tokens
    const libraries: Array<string> = []
    // Decode: the plain loop; prefill: in the engine's 128-token calls and in 512-token batches as llama-server.
    const sides: Array<{ readonly name: string; readonly run: Run; readonly results: Array<Measured> }> = [
      ...(MODE === "decode"
        ? [{ name: "in-process", run: inProcess(0, libraries), results: [] }]
        : [
          { name: `in-process ${PREFILL_CHUNK}-token calls`, run: inProcess(PREFILL_CHUNK, libraries), results: [] },
          { name: "in-process 512-token batches", run: inProcess(0, libraries), results: [] }
        ]),
      { name: "llama-server", run: server(running.url, running.pid), results: [] }
    ]
    // A warm-up request: the server's first graph allocations are not the steady state.
    await sides.at(-1)!.run(prompt, -1)
    const loads: Array<string> = [loadavg()]
    for (let round = 0; round < ROUNDS; round++) {
      for (let k = 0; k < sides.length; k++) {
        const side = sides[(k + round) % sides.length]!
        side.results.push(await side.run(prompt, round))
      }
      loads.push(loadavg())
    }
    return { built, prompt, libraries, sides, loads }
  })
}))

const { built, libraries, loads, prompt, sides } = await Effect.runPromise(program)
Fs.rmSync(work, { recursive: true, force: true })

const summary = (measured: ReadonlyArray<Measured>) => {
  const share = Object.fromEntries(categories.map((c) => [c, median(measured.map((d) => d.profile?.share[c] ?? Number.NaN))])) as Record<Category, number>
  const cpu = median(measured.map((d) => d.cpuMs / d.cpuUnits))
  const restLibraries = Array.from(new Set(measured.flatMap((d) => Object.keys(d.profile?.rest ?? {}))))
  return {
    perSecond: median(measured.map((d) => (d.units * 1000) / d.ms)),
    cpuMsPerUnit: cpu,
    switchesPerUnit: median(measured.map((d) => d.switches / d.cpuUnits)),
    cpuMsPerUnitByCategory: Object.fromEntries(categories.map((c) => [c, share[c] * cpu])) as Record<Category, number>,
    restMsPerUnit: Object.fromEntries(
      restLibraries.map((l): [string, number] => [l, median(measured.map((d) => d.profile?.rest[l] ?? 0)) * cpu]).sort((x, y) => y[1] - x[1])
    ) as Record<string, number>,
    top: measured.at(-1)?.profile?.top ?? [],
    samples: measured.map((d) => d.profile?.samples ?? 0)
  }
}
const summaries = sides.map((side) => ({ name: side.name, ...summary(side.results) }))
const reference = summaries.at(-1)!
const first = sides[0]!.results[0]!.generated.join()
const sameTokens = sides.every((side) => side.results.every((d) => d.generated.join() === first))
const unit = MODE === "decode" ? "decoded token" : "prompt token"
const result = {
  date: new Date().toISOString(),
  mode: MODE,
  model: modelName,
  threads: THREADS,
  contextSize: CONTEXT,
  batchSize: BATCH,
  promptTokens: prompt.length,
  decodeTokens: MODE === "decode" ? TOKENS : 1,
  rounds: ROUNDS,
  loads,
  unit,
  sameGreedyTokens: sameTokens,
  inProcessLibraries: libraries,
  llamaServerBuild: { cpuVariant: built.cpuVariant, linked: "static", cmakeArguments: built.cmakeArguments },
  sides: summaries
}
Fs.mkdirSync(Path.join(projectRoot, "bench", "results"), { recursive: true })
Fs.writeFileSync(Path.join(projectRoot, "bench", "results", `enginegap-${MODE}-${THREADS}t.json`), JSON.stringify(result, null, 2) + "\n")

const f = (x: number, digits = 2) => Number.isFinite(x) ? x.toFixed(digits) : "-"
const row = (label: string, value: (s: typeof summaries[number]) => number, digits = 2, ratio = false) =>
  console.log(`| ${label} | ${summaries.map((s) => f(value(s), digits)).join(" | ")} | ${summaries.slice(0, -1).map((s) => ratio ? `${f(value(s) / value(reference))}x` : f(value(s) - value(reference), digits)).join(" | ")} |`)
console.log(`enginegap ${MODE}: ${modelName}, ${THREADS} thread(s), ${MODE === "decode" ? `${TOKENS} tokens after a ${prompt.length}-token prompt` : `a ${prompt.length}-token prompt`}, ${ROUNDS} rounds, load ${loads.join(" / ")}`)
console.log(`in-process maps: ${libraries.join(", ")}; llama-server: static, ${built.cpuVariant} flags`)
console.log(`greedy tokens identical on every side: ${sameTokens}`)
console.log(`| per ${unit} | ${summaries.map((s) => s.name).join(" | ")} | ${summaries.slice(0, -1).map((s) => `${s.name} vs llama-server`).join(" | ")} |`)
console.log(`|---|${summaries.map(() => "---|").join("")}${summaries.slice(0, -1).map(() => "---|").join("")}`)
row(`${unit}s/s (own timing)`, (s) => s.perSecond, 1, true)
row("voluntary context switches", (s) => s.switchesPerUnit, 2)
row("CPU ms, whole process", (s) => s.cpuMsPerUnit, 3)
if (PERF) {
  for (const c of categories) row(`- ${c}`, (s) => s.cpuMsPerUnitByCategory[c], 3)
  for (const s of summaries) {
    console.log(`\n"rest" of ${s.name} by library (ms per ${unit}): ${Object.entries(s.restMsPerUnit).filter(([, ms]) => ms >= 0.0005).map(([l, ms]) => `${l} ${f(ms, 3)}`).join(", ")}`)
  }
  for (const s of summaries) {
    console.log(`\ntop self time, ${s.name} (last round, ms per ${unit}):`)
    for (const t of s.top) console.log(`  ${f(t.share * s.cpuMsPerUnit, 3)}  ${t.category.padEnd(18)} ${t.dso}  ${t.symbol.slice(0, 90)}`)
  }
}
