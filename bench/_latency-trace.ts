/**
 * A development tool (not a figure): where a 1-token request over a kept socket spends its time.
 * Runs a real `nativegen serve` on qwen-bench (1 thread, 8192 context, as the peer benchmark) and
 * LATENCY_N sequential 1-token requests of an 8-word chat through the client, printing per request
 * the client's time to its first Text chunk, to Done and to the stream's end. With
 * LATENCY_ROUNDS > 1 the rounds alternate; run with `tsx bench/_latency-trace.ts`.
 */
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import * as Fs from "node:fs"
import { ensureModel } from "../fixtures/models.js"
import * as Nativegen from "./peer/Nativegen.js"
import { userPrompt } from "./peer/Prompts.js"

const N = Number(process.env.LATENCY_N ?? 15)
const modelPath = ensureModel("qwen-bench")
const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length === 0 ? Number.NaN : s.length % 2 === 1 ? s[s.length >> 1]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2
}

const program = Effect.gen(function*() {
  const served = yield* Nativegen.serve({ modelPath, modelName: "qwen-bench", threads: 1, contextSize: 8192 })
  const messages = userPrompt("latency", 8)
  const one = Effect.gen(function*() {
    const start = performance.now()
    let text = Number.NaN
    let done = Number.NaN
    yield* Stream.runForEach(served.provider.generate({ messages, maxTokens: 1, sampling: { temperature: 0 } }), (chunk) =>
      Effect.sync(() => {
        if (chunk._tag === "Text" && Number.isNaN(text)) text = performance.now() - start
        if (chunk._tag === "Done") done = performance.now() - start
      }))
    return { text, done, end: performance.now() - start }
  })
  yield* one
  yield* one
  const rows: Array<{ text: number; done: number; end: number }> = []
  for (let i = 0; i < N; i++) rows.push(yield* one)
  const load = Fs.readFileSync("/proc/loadavg", "utf8").trim()
  console.log(`load ${load}`)
  console.log(`median ms: first Text ${median(rows.map((r) => r.text)).toFixed(1)}, Done ${median(rows.map((r) => r.done)).toFixed(1)}, end ${median(rows.map((r) => r.end)).toFixed(1)}`)
  console.log(`minimum ms: end ${Math.min(...rows.map((r) => r.end)).toFixed(1)}`)
})

Effect.runPromise(Effect.scoped(program)).catch((e) => {
  console.error(e)
  process.exit(1)
})
