/**
 * Aggregate decode throughput of 8 concurrent generations through NativeWorker (engine child,
 * host-driven steps), with batched decode (NATIVEGEN_BATCH_DECODE on, the default) against one
 * native call per token (off), on the `bench` model, alternating rounds in one run. Each round
 * starts 8 greedy generations on 8 sequences at once; throughput counts every token from the
 * first request to the last token.
 */
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Stream from "effect/Stream"
import { ensureModel } from "../fixtures/models.js"
import * as NativeWorker from "../src/services/NativeWorker.js"

const CONCURRENT = 8
const TOKENS = Number(process.env.BENCH_TOKENS ?? 64)
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3)
const threads = Number(process.env.BENCH_THREADS ?? 1)
const modelPath = ensureModel("bench")

const workerLayer = (batchDecode: boolean) =>
  Layer.fresh(NativeWorker.layer).pipe(
    Layer.provide(NativeWorker.hooksNoop),
    Layer.provide(NativeWorker.NativeWorkerConfig.layer({
      child: { backend: "cpu", threads, batchSize: 512, batchDecode },
      models: { generation: { modelPath, contextSize: 512, sequences: CONCURRENT } },
      stopTimeout: Duration.seconds(5)
    }))
  )

/** One round: 8 generations at once; tokens per second over the whole round. */
const round = (worker: NativeWorker.NativeWorker["Type"], prompts: ReadonlyArray<ReadonlyArray<number>>) =>
  Effect.gen(function*() {
    const start = performance.now()
    const counts = yield* Effect.forEach(prompts, (prompt, sequence) =>
      worker.generate({ prompt, maxTokens: TOKENS, sampling: { temperature: 0 }, sequence }).pipe(
        Stream.filter((e) => e._tag === "Token"),
        Stream.runCount
      ), { concurrency: "unbounded" })
    const tokens = counts.reduce((a, b) => a + b, 0)
    return tokens / ((performance.now() - start) / 1000)
  })

const program = Effect.gen(function*() {
  const workers = yield* Effect.all({
    batched: Layer.build(workerLayer(true)),
    single: Layer.build(workerLayer(false))
  })
  const batched = Context.get(workers.batched, NativeWorker.NativeWorker)
  const single = Context.get(workers.single, NativeWorker.NativeWorker)
  const prompts = yield* Effect.forEach(Array.from({ length: CONCURRENT }, (_, i) => i), (i) =>
    batched.render("generation", [{ role: "user", content: `client ${i} asks for a story number ${i * 7}` }]))
  const rows: Array<{ batched: number; single: number }> = []
  for (let r = 0; r < ROUNDS; r++) {
    const b = yield* round(batched, prompts)
    const s = yield* round(single, prompts)
    rows.push({ batched: b, single: s })
    console.log(`round ${r + 1}: batched ${b.toFixed(1)} tok/s, one call per token ${s.toFixed(1)} tok/s`)
  }
  const median = (xs: Array<number>) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
  const b = median(rows.map((r) => r.batched))
  const s = median(rows.map((r) => r.single))
  console.log(`bench model, ${threads} thread(s), ${CONCURRENT} concurrent generations x ${TOKENS} tokens, ${ROUNDS} rounds`)
  console.log(`median aggregate: batched ${b.toFixed(1)} tok/s, one call per token ${s.toFixed(1)} tok/s; ratio ${(b / s).toFixed(2)}`)
})

Effect.runPromise(Effect.scoped(program)).catch((e) => {
  console.error(e)
  process.exit(1)
})
