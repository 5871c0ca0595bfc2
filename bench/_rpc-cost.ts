/**
 * A development tool: the CPU one engine request costs the host (this process) and the engine
 * child's main thread, per call, over sequential calls: a RenderText of the follow-up's whole
 * ~4,000-word conversation (as a continuation sends three) and a Tokenize of one word (the fixed
 * cost of a request); and a continued turn's new tokens as the host got them before (three RenderText, two
 * Tokenize) and now (one RenderContinuation). CPU from process.cpuUsage and /proc schedstat. Run:
 * `NATIVEGEN_MODEL_CACHE=.cache/models UV_THREADPOOL_SIZE=1 node --import tsx bench/_rpc-cost.ts [calls]`.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { ensureModel } from "../fixtures/models.js"
import * as Runtime from "../src/layers/Runtime.js"
import { NativeWorker } from "../src/services/NativeWorker.js"
import * as Continuation from "../src/domain/Continuation.js"
import { followUp, history } from "./peer/Prompts.js"

const N = Number(process.argv[2] ?? 40)
const MiB = 1024 * 1024
const hostCpu = () => {
  const u = process.cpuUsage()
  return (u.user + u.system) / 1000
}
const childMainCpu = (pid: number) => Number(Fs.readFileSync(`/proc/${pid}/task/${pid}/schedstat`, "utf8").split(" ")[0]) / 1e6

const program = Effect.gen(function*() {
  const worker = yield* NativeWorker
  const pid = (yield* worker.readiness).pid!
  const messages = followUp("rpc", history("rpc", 3800), "the of and to", 200)
  const measure = (name: string, call: Effect.Effect<unknown, unknown>) =>
    Effect.gen(function*() {
      for (let i = 0; i < 5; i++) yield* call
      const h = hostCpu()
      const c = childMainCpu(pid)
      const t = performance.now()
      for (let i = 0; i < N; i++) yield* call
      console.log(`| ${name} | host ${((hostCpu() - h) / N).toFixed(2)} | child main ${((childMainCpu(pid) - c) / N).toFixed(2)} | wall ${((performance.now() - t) / N).toFixed(2)} |`)
    })
  console.log(`CPU ms per call, ${N} sequential calls; load ${Fs.readFileSync("/proc/loadavg", "utf8").trim()}`)
  const held = messages.slice(0, -1)
  const turn = messages.slice(-1)
  // The continuation's prompt as the host built it before: three renders, then two tokenizations.
  const before = Effect.gen(function*() {
    const texts = yield* Effect.all({
      assistantPrompt: worker.renderText("generation", held.slice(0, -1), true),
      history: worker.renderText("generation", held, false),
      full: worker.renderText("generation", messages, true)
    }, { concurrency: "unbounded" })
    const parts = Continuation.continuationTexts(texts, held[held.length - 1]!.content)
    if (typeof parts === "string") return yield* Effect.dieMessage(parts)
    return yield* Effect.all([worker.tokenize("generation", parts.closing, true), worker.tokenize("generation", parts.turn, true)], { concurrency: "unbounded" })
  })
  for (let r = 0; r < 2; r++) {
    yield* measure("continuation prompt before: 3 RenderText + 2 Tokenize, two round trips", before)
    yield* measure("continuation prompt now: 1 RenderContinuation", worker.renderContinuation("generation", held, turn, {}, {}))
    yield* measure("Tokenize of one word", worker.tokenize("generation", "hello"))
    yield* measure("RenderText of the whole conversation", worker.renderText("generation", messages.slice(0, -1), false))
  }
})

const main = Effect.gen(function*() {
  const directory = yield* Effect.acquireRelease(
    Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "nativegen-rpc-cost-"))),
    (d) => Effect.sync(() => Fs.rmSync(d, { recursive: true, force: true }))
  )
  const RuntimeLive = Runtime.layerWithModels({ generation: ensureModel("qwen-bench"), decision: ensureModel("decision") }, {
    conversationsDirectory: directory,
    worker: { child: { backend: "cpu", threads: 1, batchSize: 512 }, stopTimeout: Duration.seconds(5) },
    admission: { contextCap: { generation: 8192, decision: 512 }, workspaceReservationBytes: 64 * MiB }
  })
  yield* program.pipe(Effect.provide(RuntimeLive), Effect.provide(NodeFileSystem.layer))
}).pipe(Effect.scoped)

Effect.runPromise(main).catch((e) => {
  console.error(e)
  process.exit(1)
})
