/**
 * Prefill of the peer benchmark's ~1,000-token prompt in process (plain node-llama-cpp, no
 * runtime) split into native calls of 128, 256 and 512 tokens, the sizes alternating in rotated
 * order every round: what the chunk grid costs at a given thread count. Prints one JSON line:
 * per call size, the wall and process CPU milliseconds per round. Run:
 * `NATIVEGEN_MODEL_CACHE=.cache/models UV_THREADPOOL_SIZE=1 node --import tsx bench/_chunk-calls.ts [threads] [rounds]`.
 */
import { getLlama, type Token } from "node-llama-cpp"
import { ensureModel } from "../fixtures/models.js"
import { chatMl, userPrompt } from "./peer/Prompts.js"

const threads = Number(process.argv[2] ?? 2)
const rounds = Number(process.argv[3] ?? 3)
const SIZES = [128, 256, 512]
const llama = await getLlama({ build: "never", gpu: false, maxThreads: threads })
const model = await llama.loadModel({ modelPath: ensureModel("qwen-bench") })
const context = await model.createContext({ contextSize: 8192, threads, batchSize: 512, sequences: 1 })
const sequence = context.getSequence()
const prompt = model.tokenize(chatMl(userPrompt("chunk-calls", 1000)), true)
const results: Record<number, Array<{ ms: number; cpuMs: number }>> = {}
for (let r = 0; r < rounds; r++) {
  for (let k = 0; k < SIZES.length; k++) {
    const size = SIZES[(k + r) % SIZES.length]!
    await sequence.clearHistory()
    const start = performance.now()
    const cpu = process.cpuUsage()
    for (let at = 0; at < prompt.length - 1; at += size) {
      await sequence.evaluateWithoutGeneratingNewTokens(prompt.slice(at, Math.min(at + size, prompt.length - 1)) as Array<Token>)
    }
    const used = process.cpuUsage(cpu)
    ;(results[size] ??= []).push({ ms: Math.round(performance.now() - start), cpuMs: Math.round((used.user + used.system) / 1000) })
  }
}
console.log(JSON.stringify({ threads, tokens: prompt.length - 1, results }))
await context.dispose()
await model.dispose()
await llama.dispose()
