/**
 * The baseline: a plain in-process node-llama-cpp decode loop, run in its own process with the
 * same settings as an engine child. The prompt is a JSON array of tokens, or a JSON string of
 * text (tokenized with its special tokens). Prints one JSON line: tokens and milliseconds per round.
 * With INPROCESS_HANDSHAKE=1 (bench/enginegap.ts) it prints `ready` once loaded and waits for a line
 * on stdin before decoding, and for another before it exits, so a profiler can attach to the decode alone.
 */
import { getLlama, type Token } from "node-llama-cpp"

const [modelPath, promptJson, tokensArg, threadsArg, roundsArg] = process.argv.slice(2)
const given = JSON.parse(promptJson!) as Array<Token> | string
const tokens = Number(tokensArg)
const threads = Number(threadsArg)
// BENCH_BACKEND (bench/_target.ts): the same backend as the engine child it is compared with.
const backend = process.env.BENCH_BACKEND === undefined || process.env.BENCH_BACKEND === "" || process.env.BENCH_BACKEND === "cpu"
  ? false
  : (process.env.BENCH_BACKEND as "cuda" | "vulkan" | "metal")
const llama = await getLlama({ build: "never", gpu: backend, maxThreads: threads })
const model = await llama.loadModel({ modelPath: modelPath!, gpuLayers: backend === false ? 0 : "max" })
const prompt = typeof given === "string" ? model.tokenize(given, true) : given
const context = await model.createContext({ contextSize: Number(process.env.INPROCESS_CONTEXT ?? 2048), threads, batchSize: 512 })
const sequence = context.getSequence()
const handshake = process.env.INPROCESS_HANDSHAKE === "1"
const prefillChunk = Number(process.env.INPROCESS_PREFILL_CHUNK ?? 0)
const nextLine = () => new Promise<void>((resolve) => process.stdin.once("data", () => resolve()))
if (handshake) {
  console.log("ready")
  await nextLine()
}
/** Per round: decode tokens after the first, their wall ms and this process's CPU ms (JavaScript and native threads). */
const rounds: Array<{ tokens: number; ms: number; firstTokenMs: number; cpuMs: number; generated: Array<number> }> = []
const cpuMs = () => {
  const u = process.cpuUsage()
  return (u.user + u.system) / 1000
}
for (let r = 0; r < Number(roundsArg); r++) {
  await sequence.clearHistory()
  const start = performance.now()
  let first = 0
  let firstCpu = 0
  let n = 0
  const generated: Array<number> = []
  // INPROCESS_PREFILL_CHUNK: prefill all but the last prompt token in native calls of that many
  // tokens, as the engine does (its 128-token grid); otherwise one evaluate (512-token batches).
  let rest = prompt
  if (prefillChunk > 0) {
    for (let at = 0; at < prompt.length - 1; at += prefillChunk) {
      await sequence.evaluateWithoutGeneratingNewTokens(prompt.slice(at, Math.min(at + prefillChunk, prompt.length - 1)))
    }
    rest = prompt.slice(-1)
  }
  for await (const token of sequence.evaluate(rest, { temperature: 0 })) {
    generated.push(token)
    if (n === 0) {
      first = performance.now()
      firstCpu = cpuMs()
    }
    if (++n >= tokens) break
  }
  const end = performance.now()
  rounds.push({ tokens: n - 1, ms: end - first, firstTokenMs: first - start, cpuMs: cpuMs() - firstCpu, generated })
}
console.log(JSON.stringify(rounds))
if (handshake) {
  await nextLine()
  process.stdin.destroy()
}
await context.dispose()
await model.dispose()
await llama.dispose()
