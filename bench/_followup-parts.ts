/**
 * The peer benchmark's follow-up, through the runtime in process (Provider, Scheduler, worker and
 * a real engine child) on `qwen-bench` with the peer benchmark's settings and prompts: per round,
 * turn 1 of a conversation (cold), then its follow-up with turn 1's checkpoint. Prints each turn's
 * first-token time, the Done timings and the engine child's CPU time over the turn (utime+stime
 * from /proc: the native work and the child's JavaScript, whatever else loads the machine), with
 * the load average: alternate it with a run of another build for an A/B comparison. Run: `NATIVEGEN_MODEL_CACHE=.cache/models UV_THREADPOOL_SIZE=1 node --import tsx
 * bench/_followup-parts.ts [threads] [rounds]`.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { ensureModel } from "../fixtures/models.js"
import type { GenerateRequest } from "../src/domain/Inference.js"
import * as Runtime from "../src/layers/Runtime.js"
import { NativeWorker } from "../src/services/NativeWorker.js"
import { turn } from "./_generation.js"
import { followUp, history } from "./peer/Prompts.js"

const threads = Number(process.argv[2] ?? 1)
const rounds = Number(process.argv[3] ?? 2)
const MiB = 1024 * 1024

/** CPU milliseconds a process has used (utime + stime, at 100 ticks per second). */
const cpuOf = (pid: number | undefined) => {
  if (pid === undefined) return Number.NaN
  const fields = Fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ")
  return (Number(fields[11]) + Number(fields[12])) * 10
}

/** One turn (bench/_generation.ts) with the engine child's CPU time over it. */
const childCpuTurn = (request: GenerateRequest) =>
  Effect.gen(function*() {
    const pid = (yield* (yield* NativeWorker).readiness).pid
    const cpuBefore = cpuOf(pid)
    const t = yield* turn(request)
    return { first: Math.round(t.firstText ?? NaN), childCpuMs: cpuOf(pid) - cpuBefore, done: t.done, answer: t.answer }
  })

const program = Effect.gen(function*() {
  for (let r = 0; r < rounds; r++) {
    const seed = `parts/${threads}/${r}`
    const conversation = `parts-${r}`
    const turn1 = history(seed, 3800)
    const one = yield* childCpuTurn({ messages: turn1, conversation, maxTokens: 4, sampling: { temperature: 0 } })
    const two = yield* childCpuTurn({
      messages: followUp(seed, turn1, one.answer, 200),
      conversation,
      ...(one.done.checkpoint === undefined ? {} : { checkpoint: one.done.checkpoint }),
      maxTokens: 4,
      sampling: { temperature: 0 }
    })
    console.log(JSON.stringify({
      round: r,
      threads,
      load: Fs.readFileSync("/proc/loadavg", "utf8").trim(),
      cold: { first: one.first, childCpuMs: one.childCpuMs, usage: one.done.usage, timings: one.done.timings },
      follow: { first: two.first, childCpuMs: two.childCpuMs, usage: two.done.usage, timings: two.done.timings },
      ratio: +(two.first / one.first).toFixed(3)
    }))
  }
})

const main = Effect.gen(function*() {
  const directory = yield* Effect.acquireRelease(
    Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "nativegen-followup-parts-"))),
    (d) => Effect.sync(() => Fs.rmSync(d, { recursive: true, force: true }))
  )
  const RuntimeLive = Runtime.layerWithModels({ generation: ensureModel("qwen-bench"), decision: ensureModel("decision") }, {
    conversationsDirectory: directory,
    worker: {
      child: { backend: "cpu", threads, batchSize: 512 },
      stopTimeout: Duration.seconds(5)
    },
    admission: { contextCap: { generation: 8192, decision: 512 }, workspaceReservationBytes: 64 * MiB }
  })
  yield* program.pipe(Effect.provide(RuntimeLive), Effect.provide(NodeFileSystem.layer))
}).pipe(Effect.scoped)

Effect.runPromise(main).catch((e) => {
  console.error(e)
  process.exit(1)
})
