/**
 * Admission's charge against what a role really takes: for each model and context size, a fresh
 * engine child says hello (the baseline), context admission (default margin) gives the charge
 * (weights, vocabulary and KV and the compute the engine touches, with margin); the role is then
 * loaded and used once (a 600-token prefill in 512-token batches and two decoded tokens, so its
 * buffers are touched), and the child's resident set growth since hello (/proc/<pid>/status) is the
 * measurement: all the role cost that child, planning included. Prints charge / measured per case
 * (target: at least 1, at most 1.15), the bare plan and the planning's own growth, and the load
 * average. Set BENCH_ADMISSION_CASES to `model:context,...` to choose the cases.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import * as Fs from "node:fs"
import { ensureModel, type ModelName } from "../fixtures/models.js"
import { spawn } from "../src/native/ChildProcess.js"
import { admissionOver, childPlanner, mib, residentBytes, useRoleOnce } from "../test/support/admission-child.js"

const cases = (process.env.BENCH_ADMISSION_CASES ?? "tiny:4096,bench:1024,bench:4096,bench:8192,qwen-bench:1024,qwen-bench:4096,qwen-bench:8192")
  .split(",")
  .map((c) => {
    const [model, context] = c.split(":")
    return { model: model as ModelName, context: Number(context) }
  })

const measure = (model: ModelName, context: number) =>
  Effect.scoped(Effect.gen(function*() {
    const child = yield* spawn({ settings: { backend: "cpu", threads: 1, batchSize: 512 }, stopTimeout: Duration.seconds(3) })
    const { client } = child
    const hello = yield* client.Hello()
    const before = yield* residentBytes(child.pid)
    const plan = childPlanner(client)
    const admission = yield* admissionOver(hello)
    const admitted = yield* admission.admitContexts({ generation: { modelPath: ensureModel(model), cap: context } }, plan)
    const role = admitted.roles[0]!
    const afterPlan = yield* residentBytes(child.pid)
    yield* client.Load({ role: "generation", modelPath: role.modelPath, contextSize: role.contextSize, sequences: 1 }).pipe(Stream.runDrain)
    yield* useRoleOnce(client, "generation", role.contextSize, "the quick brown fox ".repeat(200))
    const measured = (yield* residentBytes(child.pid)) - before
    const charged = role.weightsBytes + role.contextBytes
    const bare = yield* plan(role.modelPath, [role.contextSize], 1)
    const planContext = bare.contexts[0]!
    const planned = `plan: weights ${mib(bare.weights.cpuBytes)}, vocabulary ${mib(bare.overhead.cpuBytes)}, context ${
      mib(planContext.context.cpuBytes)
    } of which untouched ${mib(planContext.untouched.cpuBytes)}; planning grew ${mib(afterPlan - before)} MiB`
    return { model, context: role.contextSize, charged, measured, planned }
  }))

const program = Effect.gen(function*() {
  for (const c of cases) {
    const r = yield* measure(c.model, c.context)
    const ratio = r.charged / r.measured
    const line = `${r.model} at ${r.context} tokens: charged ${mib(r.charged)} MiB, measured ${mib(r.measured)} MiB, charge/measured ${
      ratio.toFixed(2)
    }${ratio >= 1 && ratio <= 1.15 ? "" : " (outside 1-1.15)"}`
    console.log(`${line}\n  ${r.planned}`)
  }
  console.log(`load average ${Fs.readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ")}`)
})

Effect.runPromise(program).catch((e) => {
  console.error(e)
  process.exit(1)
})
