/**
 * Admission in VRAM on the GPU (`npm run test:gpu`): the budget is the GPU's; weights and KV are
 * charged against it before loading; a budget that fits only a smaller context admits that
 * context; a model that does not fit is refused with the numbers (the runtime does not start, and
 * nothing runs out of memory); the memory reading reconciliation uses is the child's own VRAM
 * (nvidia-smi's per-process listing), which another process's allocation on the GPU leaves alone.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Stream from "effect/Stream"
import { ensureModel } from "../../fixtures/models.js"
import { spawn } from "../../src/native/ChildProcess.js"
import * as NvidiaSmi from "../../src/native/engine/NvidiaSmi.js"
import * as Admission from "../../src/services/Admission.js"
import { candidateSizes, contextCharge, weightsCharge } from "../../src/services/admission/ContextPlanner.js"
import { Provider } from "../../src/services/Provider.js"
import { runtimeLayer, testChild, testRunEnv } from "../support/engine.js"
import { gpuBackend, noGpu, skipMessage } from "./support.js"

skipMessage("admission")

const MiB = 1024 * 1024
const cuda = { ...testChild, backend: gpuBackend } as const
const generation = ensureModel("qwen-bench")
const decision = ensureModel("qwen-decision")
const base = {
  ...Admission.AdmissionConfig.defaults,
  workspaceReservationBytes: 64 * MiB,
  contextCap: { generation: 8192, decision: 1024 }
}

/** A CUDA engine child for the scope, with its client. */
const cudaChild = spawn({ settings: cuda, env: testRunEnv, stopTimeout: Duration.seconds(3) })

/** What admission charges `modelPath` on the GPU at each candidate size (the child's plan, with margin). */
const needs = (modelPath: string, cap: number, sequences: number) =>
  Effect.scoped(Effect.gen(function*() {
    const { client } = yield* cudaChild
    const plan = yield* client.Plan({ modelPath, contextSizes: candidateSizes(cap, 40960), sequences })
    const weights = weightsCharge(plan, "gpu", base.planMargin)
    return new Map(plan.contexts.map((p) => [p.contextSize, weights + contextCharge(p, "gpu", base.planMargin)]))
  }))

const readinessWith = (admission: Partial<Admission.AdmissionConfigShape>) =>
  Effect.scoped(Effect.gen(function*() {
    const context = yield* Layer.build(runtimeLayer({ admission: { ...base, ...admission }, worker: { child: cuda } }, { generation, decision }))
    return yield* Context.get(context, Provider).readiness
  }))

describe.skipIf(noGpu !== undefined)("admission in VRAM (CUDA)", () => {
  it.live("the budget is the GPU's free VRAM minus headroom, and the roles are charged in it", () =>
    Effect.gen(function*() {
      const ready = yield* readinessWith({})
      assert.strictEqual(ready.budget?.kind, "gpu")
      assert.match(ready.budget?.device ?? "", /NVIDIA|H200|H100|GPU/i)
      assert.isAbove(ready.budget!.weightsBytes, 0)
      assert.isAbove(ready.budget!.kvBytes, 0)
      assert.isAbove(ready.budget!.totalBytes, 8 * 1024 * MiB)
      console.info(`test:gpu admission: ${ready.budget!.device}: budget ${(ready.budget!.budgetBytes / MiB).toFixed(0)} MiB, charged ${(ready.budget!.chargedBytes / MiB).toFixed(1)} MiB (weights ${(ready.budget!.weightsBytes / MiB).toFixed(1)}, KV ${(ready.budget!.kvBytes / MiB).toFixed(1)})`)
    }), 180_000)

  it.live("a VRAM budget that fits only a smaller generation context admits that context", () =>
    Effect.gen(function*() {
      const sequences = 3
      const gen = yield* needs(generation, 8192, sequences)
      const dec = yield* needs(decision, 1024, 1)
      const capBytes = dec.get(1024)! + gen.get(2048)! + base.workspaceReservationBytes
      for (const [size, need] of gen) if (size > 2048) assert.isAbove(need, gen.get(2048)!, `size ${size}`)
      const ready = yield* readinessWith({ capBytes })
      const role = ready.roles.find((r) => r.role === "generation")!
      assert.strictEqual(role.limitedBy, "budget")
      assert.isBelow(role.admittedContext!, 8192)
      assert.isAtLeast(role.admittedContext!, 2048)
      assert.strictEqual(ready.budget?.kind, "gpu")
      console.info(`test:gpu admission: budget ${(capBytes / MiB).toFixed(1)} MiB admitted a generation context of ${role.admittedContext} (cap 8192)`)
    }), 180_000)

  it.live("a model that does not fit the VRAM budget is refused with the numbers, before anything is loaded", () =>
    Effect.gen(function*() {
      const gen = yield* needs(generation, 8192, 3)
      const capBytes = gen.get(256)! + base.workspaceReservationBytes - 1
      const error = yield* Effect.flip(readinessWith({ capBytes }))
      assert.strictEqual(error._tag, "ContextAdmissionFailed")
      assert.match(error.message, /no context fits the device: .* needs \d+ bytes/)
      console.info(`test:gpu admission: ${error.message}`)
    }), 180_000)

  it.live("the child's VRAM reading is its own: another process's allocation on the GPU does not change it", () =>
    Effect.scoped(Effect.gen(function*() {
      const ours = yield* cudaChild
      yield* ours.client.Load({ role: "generation", modelPath: generation, contextSize: 2048, sequences: 1 }).pipe(Stream.runDrain)
      const before = yield* ours.client.Memory()
      const deviceBefore = (yield* NvidiaSmi.gpus)[0]!
      // Another process: a second engine child that loads a model with a large context on the same GPU.
      const other = yield* cudaChild
      yield* other.client.Load({ role: "generation", modelPath: generation, contextSize: 32768, sequences: 1 }).pipe(Stream.runDrain)
      const otherOwn = yield* NvidiaSmi.processMemory(other.pid)
      const deviceAfter = (yield* NvidiaSmi.gpus)[0]!
      const after = yield* ours.client.Memory()
      const deviceGrowth = deviceBefore.freeBytes - deviceAfter.freeBytes
      console.info(`test:gpu admission: our child ${(before.vramUsedBytes / MiB).toFixed(0)} -> ${(after.vramUsedBytes / MiB).toFixed(0)} MiB; the other child holds ${otherOwn === undefined ? "?" : (otherOwn / MiB).toFixed(0)} MiB; device used grew ${(deviceGrowth / MiB).toFixed(0)} MiB`)
      assert.isDefined(yield* NvidiaSmi.processMemory(ours.pid), "the driver lists our child (per-process VRAM is available)")
      assert.isAbove(before.vramUsedBytes, 0)
      assert.isAbove(deviceGrowth, 256 * MiB)
      assert.isBelow(Math.abs(after.vramUsedBytes - before.vramUsedBytes), 16 * MiB)
    })), 180_000)
})
