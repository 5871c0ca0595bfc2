/**
 * Per-token decode cost through NativeWorker (engine child, host-driven steps over the RPC
 * socket) against a plain in-process node-llama-cpp loop, on the `bench` model, alternating
 * rounds in one run. Decode time excludes the first token (prefill) on both sides.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Stream from "effect/Stream"
import * as ChildProcess from "node:child_process"
import * as Path from "node:path"
import { ensureModel } from "../fixtures/models.js"
import * as NativeWorker from "../src/services/NativeWorker.js"

const TOKENS = 257
const ROUNDS = 3
const threads = Number(process.env.BENCH_THREADS ?? 2)
const modelPath = ensureModel("bench")

const inProcess = (prompt: ReadonlyArray<number>) =>
  Effect.sync(() => {
    const out = ChildProcess.execFileSync(process.execPath, [
      "--import", "tsx", Path.join(import.meta.dirname, "_inprocess.ts"),
      modelPath, JSON.stringify(prompt), String(TOKENS), String(threads), "1"
    ], { env: { ...process.env, UV_THREADPOOL_SIZE: "1" }, encoding: "utf8" })
    return (JSON.parse(out.trim().split("\n").pop()!) as Array<{ tokens: number; ms: number }>)[0]!
  })

const program = Effect.gen(function*() {
  const worker = yield* NativeWorker.NativeWorker
  const prompt = yield* worker.render("generation", [{ role: "user", content: "measure the engine" }])
  const viaWorker = Effect.gen(function*() {
    let first = 0
    let n = 0
    yield* Stream.runForEach(worker.generate({ prompt, maxTokens: TOKENS, sampling: { temperature: 0 } }), (e) =>
      Effect.sync(() => {
        if (e._tag === "Token" && n++ === 0) first = performance.now()
      }))
    return { tokens: n - 1, ms: performance.now() - first }
  })
  const rows: Array<{ worker: number; plain: number }> = []
  for (let r = 0; r < ROUNDS; r++) {
    const w = yield* viaWorker
    const p = yield* inProcess(prompt)
    rows.push({ worker: w.ms / w.tokens, plain: p.ms / p.tokens })
    console.log(`round ${r + 1}: worker ${(w.ms / w.tokens).toFixed(3)} ms/token, in-process ${(p.ms / p.tokens).toFixed(3)} ms/token`)
  }
  const mean = (xs: Array<number>) => xs.reduce((a, b) => a + b, 0) / xs.length
  const w = mean(rows.map((r) => r.worker))
  const p = mean(rows.map((r) => r.plain))
  console.log(`bench model, ${threads} threads, ${TOKENS - 1} decode tokens x ${ROUNDS} rounds`)
  console.log(`worker ${w.toFixed(3)} ms/token (${(1000 / w).toFixed(1)} tok/s), in-process ${p.toFixed(3)} ms/token (${(1000 / p).toFixed(1)} tok/s)`)
  console.log(`per-token overhead ${(w - p).toFixed(3)} ms; ratio worker/in-process ${(w / p).toFixed(3)}`)
})

const WorkerLive = NativeWorker.layer.pipe(
  Layer.provide(NativeWorker.hooksNoop),
  Layer.provide(NativeWorker.NativeWorkerConfig.layer({
    child: { backend: "cpu", threads, batchSize: 512 },
    models: { generation: { modelPath, contextSize: 2048 } },
    stopTimeout: Duration.seconds(5)
  }))
)
Effect.runPromise(program.pipe(Effect.provide(WorkerLive))).catch((e) => {
  console.error(e)
  process.exit(1)
})
