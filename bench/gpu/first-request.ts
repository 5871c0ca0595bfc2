/**
 * The first request's time to first token on a fresh engine, with and without a start-up warm-up
 * (issue 19: the design this rebuilds saw a 19.8 s first-request stall before driver-cache
 * warm-up). In-process node-llama-cpp on BENCH_BACKEND (default cuda), the engine child's settings
 * (context 8192, batch 512, every layer on the device); run once per mode, each in a fresh process:
 *   `none`: load, then the 4,000-token prompt at once;
 *   `child`: load, then the engine child's own warm-up (one token after "hi"), then the prompt.
 * Prints one JSON line: the mode, the load time, the warm-up time, the first prompt's TTFT and a
 * second prompt's (steady state). Usage: tsx bench/gpu/first-request.ts <model.gguf> <none|child>
 */
import { getLlama, LlamaLogLevel } from "node-llama-cpp"
import { wordsOf } from "../peer/Prompts.js"

const [modelPath, mode] = process.argv.slice(2)
const backend = process.env.BENCH_BACKEND ?? "cuda"
const gpu = backend === "cpu" ? false : (backend as "cuda" | "vulkan")
const started = performance.now()
const llama = await getLlama({ build: "never", gpu, maxThreads: 1, logLevel: LlamaLogLevel.error, progressLogs: false })
const model = await llama.loadModel({ modelPath: modelPath!, gpuLayers: gpu === false ? 0 : "max" })
const context = await model.createContext({ contextSize: 8192, batchSize: 512, threads: 1, sequences: 1 })
const sequence = context.getSequence()
const loadMs = performance.now() - started

/** Milliseconds to the first generated token of `text` on a cleared sequence. */
const firstToken = async (text: string) => {
  await sequence.clearHistory()
  const tokens = model.tokenize(text)
  const t0 = performance.now()
  for await (const _ of sequence.evaluate(tokens, { temperature: 0 })) break
  return { ms: performance.now() - t0, tokens: tokens.length }
}

let warmUpMs = 0
if (mode === "child") warmUpMs = (await firstToken("hi")).ms
const first = await firstToken(wordsOf("first-request/1", 4000))
const second = await firstToken(wordsOf("first-request/2", 4000))
console.log(JSON.stringify({ mode, backend, loadMs: Math.round(loadMs), warmUpMs: Math.round(warmUpMs), firstMs: Math.round(first.ms), secondMs: Math.round(second.ms), promptTokens: first.tokens }))
await context.dispose()
await model.dispose()
await llama.dispose()
