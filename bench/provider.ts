/**
 * The Provider under load, on the `bench` model at 1 thread (issue 6's report figures), in one run
 * with alternating rounds so that machine load falls on every side alike:
 *
 * 1. Decision delay against the decode step: a long greedy generation streams through
 *    `Provider.generate`; after DECIDE_AT tokens a `Provider.decide` is submitted. Measured: submit
 *    to result (and the decision's queueMillis), the generation's mean decode step over the
 *    STEP_WINDOW tokens before the submit, the delay as a multiple of that step, the generation
 *    tokens that arrived between submit and result, and the longest gap between generation tokens
 *    around the decision (the stall the generation saw). The same decision on an idle engine is the
 *    reference.
 * 2. Decode cost through the Provider against the plain in-process node-llama-cpp loop of
 *    bench/_inprocess.ts (own process, `build: "never"`, no GPU, 1 thread, UV_THREADPOOL_SIZE=1):
 *    the same rendered prompt, greedy, SPEED_TOKENS decode steps; the first token (prefill) is
 *    excluded on both sides.
 */
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Stream from "effect/Stream"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { promisify } from "node:util"
import { ensureModel } from "../fixtures/models.js"
import { benchBackend, benchModel } from "./_target.js"
import type { DecideRequest, GenerateRequest } from "../src/domain/Inference.js"
import * as Runtime from "../src/layers/Runtime.js"
import { NativeWorker } from "../src/services/NativeWorker.js"
import { Provider } from "../src/services/Provider.js"
import { isMain } from "./peer/Main.js"

const GENERATION_TOKENS = 400
const DECIDE_AT = 50
const STEP_WINDOW = 40
const DECISION_ROUNDS = 10
const SPEED_TOKENS = 200
/** Speed pairs run in every other decision round, alternating which side goes first. */
const SPEED_EVERY = 2
const MiB = 1024 * 1024

const modelPath = ensureModel(benchModel("bench"))
const story: GenerateRequest = {
  messages: [{ role: "user", content: "tell me a long story about the sea" }],
  maxTokens: GENERATION_TOKENS,
  sampling: { temperature: 0 }
}
const question: DecideRequest = {
  prompt: "is the sea calm tonight?",
  heads: [{ name: "calm", labels: ["yes", "no", "unsure"] }]
}
const loadavg = () => Fs.readFileSync("/proc/loadavg", "utf8").trim()
const now = Effect.sync(() => performance.now())
const execFile = promisify(ChildProcess.execFile)

const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  const m = s.length >> 1
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2
}
const max = (xs: ReadonlyArray<number>) => Math.max(...xs)
const mean = (xs: ReadonlyArray<number>) => xs.reduce((a, b) => a + b, 0) / xs.length

/** One decision submitted mid-generation. */
const underLoad = Effect.gen(function*() {
  const provider = yield* Provider
  const arrivals: Array<number> = []
  const reached = yield* Deferred.make<void>()
  const generation = yield* provider.generate(story).pipe(
    Stream.runForEach((chunk) =>
      Effect.suspend(() => {
        if (chunk._tag !== "Text") return Effect.void
        const t = performance.now()
        for (let i = 0; i < chunk.tokens.length; i++) arrivals.push(t)
        return arrivals.length >= DECIDE_AT ? Deferred.succeed(reached, undefined) : Effect.void
      })
    ),
    Effect.fork
  )
  yield* Deferred.await(reached)
  const before = arrivals.length
  const submitted = yield* now
  const decision = yield* provider.decide(question)
  const answered = yield* now
  const after = arrivals.length
  yield* Fiber.join(generation)
  const step = (arrivals[before - 1]! - arrivals[before - 1 - STEP_WINDOW]!) / STEP_WINDOW
  let stall = 0
  for (let i = Math.max(1, before - 1); i < Math.min(arrivals.length, after + 8); i++) {
    stall = Math.max(stall, arrivals[i]! - arrivals[i - 1]!)
  }
  return {
    delay: answered - submitted,
    queue: decision.queueMillis,
    step,
    ratio: (answered - submitted) / step,
    during: after - before,
    stall,
    generated: arrivals.length
  }
})

const idleDecide = Effect.gen(function*() {
  const provider = yield* Provider
  const submitted = yield* now
  const decision = yield* provider.decide(question)
  return { delay: (yield* now) - submitted, queue: decision.queueMillis }
})

/** ms per decode token through the Provider (first token excluded). */
const viaProvider = (messages: GenerateRequest["messages"]) =>
  Effect.gen(function*() {
    const provider = yield* Provider
    const arrivals: Array<number> = []
    yield* Stream.runForEach(
      provider.generate({ messages, maxTokens: SPEED_TOKENS + 1, sampling: { temperature: 0 } }),
      (chunk) =>
        Effect.sync(() => {
          if (chunk._tag !== "Text") return
          const t = performance.now()
          for (let i = 0; i < chunk.tokens.length; i++) arrivals.push(t)
        })
    )
    return { tokens: arrivals.length - 1, ms: arrivals[arrivals.length - 1]! - arrivals[0]! }
  })

/** ms per decode token in the plain in-process loop (bench/_inprocess.ts, its own process). */
const inProcess = (prompt: ReadonlyArray<number>) =>
  Effect.promise(async () => {
    const { stdout } = await execFile(process.execPath, [
      "--import", "tsx", Path.join(import.meta.dirname, "_inprocess.ts"),
      modelPath, JSON.stringify(prompt), String(SPEED_TOKENS + 1), "1", "1"
    ], { env: { ...process.env, UV_THREADPOOL_SIZE: "1" }, encoding: "utf8" })
    return (JSON.parse(stdout.trim().split("\n").pop()!) as Array<{ tokens: number; ms: number }>)[0]!
  })

const program = Effect.gen(function*() {
  const worker = yield* NativeWorker
  const prompt = yield* worker.render("generation", story.messages)
  console.log(`load average at start: ${loadavg()}`)
  // Warm-up, discarded: first generation and first decision on a fresh child.
  yield* underLoad
  yield* idleDecide

  const loaded: Array<Effect.Effect.Success<typeof underLoad>> = []
  const idle: Array<Effect.Effect.Success<typeof idleDecide>> = []
  const speed: Array<{ provider: number; plain: number; providerTokens: number; plainTokens: number }> = []
  for (let r = 0; r < DECISION_ROUNDS; r++) {
    const l = yield* underLoad
    const i = yield* idleDecide
    loaded.push(l)
    idle.push(i)
    let line = `round ${String(r + 1).padStart(2)}: decide mid-generation ${l.delay.toFixed(1)} ms ` +
      `(queue ${l.queue.toFixed(0)} ms, step ${l.step.toFixed(2)} ms, x${l.ratio.toFixed(2)}, ${l.during} tokens, stall ${l.stall.toFixed(1)} ms); ` +
      `idle ${i.delay.toFixed(1)} ms`
    if (r % SPEED_EVERY === 1) {
      const providerFirst = speed.length % 2 === 0
      const a = providerFirst ? yield* viaProvider(story.messages) : yield* inProcess(prompt)
      const b = providerFirst ? yield* inProcess(prompt) : yield* viaProvider(story.messages)
      const [p, q] = providerFirst ? [a, b] : [b, a]
      speed.push({ provider: p.ms / p.tokens, plain: q.ms / q.tokens, providerTokens: p.tokens, plainTokens: q.tokens })
      line += `; decode provider ${(p.ms / p.tokens).toFixed(3)} ms/token, in-process ${(q.ms / q.tokens).toFixed(3)} ms/token` +
        (providerFirst ? "" : " (in-process first)")
    }
    console.log(line)
  }

  const row = (name: string, xs: ReadonlyArray<number>, digits = 1) =>
    `  ${name.padEnd(44)} ${median(xs).toFixed(digits).padStart(9)} ${max(xs).toFixed(digits).padStart(9)}`
  console.log(`\nbench model, 1 thread, batch 512; generation ${GENERATION_TOKENS} tokens greedy, decision (1 head, ${question.heads[0]!.labels.length} labels) submitted after ${DECIDE_AT}; ${DECISION_ROUNDS} rounds`)
  console.log(`  ${"".padEnd(44)} ${"median".padStart(9)} ${"max".padStart(9)}`)
  console.log(row("decide mid-generation, submit->result (ms)", loaded.map((l) => l.delay)))
  console.log(row("  its queueMillis (ms)", loaded.map((l) => l.queue)))
  console.log(row("decode step before submit (ms)", loaded.map((l) => l.step), 2))
  console.log(row("delay / decode step", loaded.map((l) => l.ratio), 2))
  console.log(row("generation tokens during the decision", loaded.map((l) => l.during), 0))
  console.log(row("longest generation token gap (ms)", loaded.map((l) => l.stall)))
  console.log(row("decide idle, submit->result (ms)", idle.map((i) => i.delay)))
  console.log(row("  its queueMillis (ms)", idle.map((i) => i.queue)))
  const incomplete = loaded.filter((l) => l.generated !== GENERATION_TOKENS).length
  if (incomplete > 0) console.log(`  note: ${incomplete} generations ended before ${GENERATION_TOKENS} tokens`)
  console.log(`  mid-generation / idle decide (medians): ${(median(loaded.map((l) => l.delay)) / median(idle.map((i) => i.delay))).toFixed(2)}`)

  const p = mean(speed.map((s) => s.provider))
  const q = mean(speed.map((s) => s.plain))
  console.log(`\ndecode, ${SPEED_TOKENS} steps after the first token, ${speed.length} alternating rounds each`)
  console.log(`  provider   ${p.toFixed(3)} ms/token (${(1000 / p).toFixed(1)} tok/s)  rounds ${speed.map((s) => s.provider.toFixed(3)).join(" ")}`)
  console.log(`  in-process ${q.toFixed(3)} ms/token (${(1000 / q).toFixed(1)} tok/s)  rounds ${speed.map((s) => s.plain.toFixed(3)).join(" ")}`)
  const counts = new Set(speed.flatMap((s) => [s.providerTokens, s.plainTokens]))
  if (counts.size > 1) console.log(`  note: decode token counts differ: ${[...counts].join(", ")}`)
  console.log(`  provider / in-process ${(p / q).toFixed(3)} (per-token overhead ${(p - q).toFixed(3)} ms)`)
  console.log(`load average at end: ${loadavg()}`)
})

/**
 * The decision-delay figure alone, for bench/peer.ts: after the same warm-up, `rounds` decisions
 * submitted mid-generation (delay, the decode step before the submit, and their ratio) each
 * followed by the same decision on the idle engine.
 */
export const measureDecisionDelay = (rounds: number) =>
  Effect.gen(function*() {
    yield* underLoad
    yield* idleDecide
    const loaded: Array<Effect.Effect.Success<typeof underLoad>> = []
    const idle: Array<Effect.Effect.Success<typeof idleDecide>> = []
    for (let r = 0; r < rounds; r++) {
      loaded.push(yield* underLoad)
      idle.push(yield* idleDecide)
    }
    return { loaded, idle }
  }).pipe(Effect.provide(RuntimeLive))

const RuntimeLive = Runtime.layerWithModels({ generation: modelPath, decision: ensureModel("decision") }, {
  worker: { child: { backend: benchBackend, threads: 1, batchSize: 512 }, stopTimeout: Duration.seconds(5) },
  admission: { contextCap: { generation: 2048, decision: 1024 }, workspaceReservationBytes: 64 * MiB }
})
if (isMain(import.meta.url)) {
  Effect.runPromise(program.pipe(Effect.provide(RuntimeLive))).catch((e) => {
    console.error(e)
    process.exit(1)
  })
}
