/**
 * The physical floor of the peer benchmark's follow-up figure: a plain in-process node-llama-cpp
 * run of the same prompts (bench/peer/Prompts.ts: the ~3,800-word conversation, then its follow-up
 * of ~200 new words), no runtime around it. Per round: the cold prefill of turn 1 to its first
 * token, then the follow-up's new tokens on top of the cached history to its first token, the new
 * tokens evaluated in one native call and, for comparison, on the 128-token grid (a call ends at
 * every multiple of 128: what a continuation did before it was let off the grid).
 * Prints one JSON line per round: wall and process CPU milliseconds (at 1 thread the CPU time is the
 * work itself, whatever else loads the machine). Run: `NATIVEGEN_MODEL_CACHE=.cache/models UV_THREADPOOL_SIZE=1
 * node --import tsx bench/_followup-floor.ts [threads] [rounds]`.
 */
import { getLlama, type Token } from "node-llama-cpp"
import { ensureModel } from "../fixtures/models.js"
import { chatMl, followUp, history } from "./peer/Prompts.js"

const threads = Number(process.argv[2] ?? 1)
const rounds = Number(process.argv[3] ?? 2)
const CHUNK = 128
const llama = await getLlama({ build: "never", gpu: false, maxThreads: threads })
const model = await llama.loadModel({ modelPath: ensureModel("qwen-bench") })
const context = await model.createContext({ contextSize: 8192, threads, batchSize: 512, sequences: 1 })
const sequence = context.getSequence()

/** Time from start to the first sampled token after `prefix` is cached and `tail` evaluated in `splits`. */
const firstToken = async (tail: ReadonlyArray<Token>, splits: ReadonlyArray<number>) => {
  const start = performance.now()
  const cpuStart = process.cpuUsage()
  const calls: Array<number> = []
  let at = 0
  for (const end of [...splits, tail.length - 1]) {
    if (end <= at) continue
    const t = performance.now()
    await sequence.evaluateWithoutGeneratingNewTokens(tail.slice(at, end) as Array<Token>)
    calls.push(Math.round(performance.now() - t))
    at = end
  }
  const t = performance.now()
  const iterator = sequence.evaluate([tail[tail.length - 1]!], { temperature: 0 })
  await iterator.next()
  await iterator.return()
  const decode = performance.now() - t
  const cpu = process.cpuUsage(cpuStart)
  return { ms: Math.round(performance.now() - start), cpuMs: Math.round((cpu.user + cpu.system) / 1000), calls, decode: Math.round(decode) }
}

for (let r = 0; r < rounds; r++) {
  const seed = `floor/${r}`
  const turn1 = history(seed, 3800)
  const cold = model.tokenize(chatMl(turn1), true)
  // The follow-up as nativegen's continuation builds it: turn 1's tokens, 4 generated ones, then the rest.
  const reply = "the of and to"
  const full = model.tokenize(chatMl(followUp(seed, turn1, reply, 200)), true)
  let shared = 0
  while (shared < cold.length && cold[shared] === full[shared]) shared++
  await sequence.clearHistory()
  const coldRun = await firstToken(cold, [])
  // Cold leaves cold[0..n-1) cached plus the sampled token; keep the shared prefix only.
  // The grid's split: a call ends at every multiple of the chunk size (positions past `shared`).
  const gridSplits: Array<number> = []
  for (let at = Math.ceil((shared + 1) / CHUNK) * CHUNK; at < full.length - 1; at += CHUNK) gridSplits.push(at - shared)
  const variants: Record<string, number[]> = { oneCall: [], grid: gridSplits }
  const follow: Record<string, Awaited<ReturnType<typeof firstToken>>> = {}
  for (const [name, splits] of Object.entries(variants)) {
    await sequence.eraseContextTokenRanges([{ start: shared, end: sequence.nextTokenIndex }])
    follow[name] = await firstToken(full.slice(shared), splits)
  }
  console.log(JSON.stringify({
    round: r,
    threads,
    coldTokens: cold.length,
    followTokens: full.length,
    reused: shared,
    newTokens: full.length - shared,
    cold: coldRun,
    follow,
    ratio: Object.fromEntries(Object.entries(follow).map(([k, v]) => [k, +(v.ms / coldRun.ms).toFixed(3)])),
    cpuRatio: Object.fromEntries(Object.entries(follow).map(([k, v]) => [k, +(v.cpuMs / coldRun.cpuMs).toFixed(3)]))
  }))
}
await context.dispose()
await model.dispose()
await llama.dispose()
