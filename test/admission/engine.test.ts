/**
 * Context admission against a real engine child (one shared worker with no model loaded, which
 * still answers plans) on the generated models: a budget that fits only a smaller generation
 * context admits it; a budget that fits nothing fails with the facts per role; the exact cap and
 * the trained context are kept; the admitted contexts bound each request's tokens.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Option from "effect/Option"
import { ensureModel } from "../../fixtures/models.js"
import * as Admission from "../../src/services/Admission.js"
import { candidateSizes, contextCharge, weightsCharge } from "../../src/services/admission/ContextPlanner.js"
import * as Runtime from "../../src/layers/Runtime.js"
import { NativeWorker } from "../../src/services/NativeWorker.js"
import { Provider } from "../../src/services/Provider.js"
import * as Scheduler from "../../src/services/Scheduler.js"
import { testChild, testRunEnv, workerLayer } from "../support/engine.js"

const MiB = 1024 * 1024
const sequences = Scheduler.sequencesOf(Scheduler.SchedulerConfig.defaults)

const config = (overrides: Partial<Admission.AdmissionConfigShape>): Admission.AdmissionConfigShape => ({
  ...Admission.AdmissionConfig.defaults,
  workspaceReservationBytes: 8 * MiB,
  contextCap: { generation: 8192, decision: 1024 },
  ...overrides
})

/** Admission.layer over the shared worker's first child's inventory, published by hand, with the given configuration. */
const admissionWith = (c: Admission.AdmissionConfigShape) =>
  Effect.gen(function*() {
    const { backend, devices } = yield* Effect.flatMap(NativeWorker, (worker) => worker.readiness)
    return yield* Admission.Admission.pipe(
      Effect.provide(Admission.layer.pipe(
        Layer.provide(Admission.DeviceInventory.layerPublished({ backend: backend ?? "unknown", devices })),
        Layer.provide(Admission.AdmissionConfig.layer(c))
      )),
      Logger.withMinimumLogLevel(LogLevel.Warning)
    )
  })

/** Context admission planned on the shared worker. */
const admitContexts = (admission: Admission.Admission["Type"], roles: Parameters<Admission.Admission["Type"]["admitContexts"]>[0]) =>
  Effect.flatMap(NativeWorker, (worker) => admission.admitContexts(roles, worker.plan))

/** What context admission will charge a model at each candidate size, straight from the child's plan. */
const needs = (modelPath: string, cap: number, c: Admission.AdmissionConfigShape, sequences = 1) =>
  Effect.gen(function*() {
    const worker = yield* NativeWorker
    const plan = yield* worker.plan(modelPath, candidateSizes(cap, 8192), sequences)
    const weights = weightsCharge(plan, "cpu", c.planMargin)
    return new Map(plan.contexts.map((p) => [p.contextSize, weights + contextCharge(p, "cpu", c.planMargin)]))
  })

describe("Admission with a real engine child", () => {
  it.layer(workerLayer({ models: {} }), { timeout: 120_000 })((it) => {
    const generation = ensureModel("tiny")
    const decision = ensureModel("decision")

    it.effect("a budget that fits only a smaller generation context admits it, and leaves the reservation", () =>
      Effect.gen(function*() {
        const base = config({})
        const gen = yield* needs(generation, 8192, base)
        const dec = yield* needs(decision, 1024, base)
        const capBytes = dec.get(1024)! + gen.get(2048)! + base.workspaceReservationBytes
        // Precondition: every larger generation context needs more than that budget leaves.
        for (const [size, need] of gen) if (size > 2048) assert.isAbove(need, gen.get(2048)!, `size ${size}`)
        const admission = yield* admissionWith({ ...base, capBytes })
        const admitted = yield* admitContexts(admission, {
          generation: { modelPath: generation },
          decision: { modelPath: decision }
        })
        assert.deepStrictEqual(admitted.roles.map((r) => [r.role, r.contextSize, r.limitedBy]), [
          ["decision", 1024, "cap"],
          ["generation", 2048, "budget"]
        ])
        assert.strictEqual(admitted.roles[0]!.trainedContextSize, 8192)
        assert.strictEqual(yield* admission.contextOf("generation"), 2048)
        assert.deepStrictEqual(Option.map(yield* admission.admitted, (a) => a.residentBytes), Option.some(capBytes - base.workspaceReservationBytes))
        // Charging both roles as admitted leaves exactly the reservation for workspace.
        yield* Effect.scoped(
          Effect.gen(function*() {
            yield* admission.chargeResident("decision")
            yield* admission.chargeResident("generation")
            const s = yield* admission.status
            assert.strictEqual(s.freeBytes, base.workspaceReservationBytes)
            assert.strictEqual(s.byKind.weights.count, 2)
            assert.strictEqual(s.byKind.kv.count, 2)
            assert.strictEqual(s.admitted?.roles.length, 2)
            const probe = yield* admission.workspace({ lane: "decision", bytes: base.workspaceReservationBytes, label: "probe" })
            assert.strictEqual(probe.bytes, base.workspaceReservationBytes)
          })
        )
        assert.strictEqual((yield* admission.status).chargedBytes, 0)
        // The exact token budget of a request is checked against the admitted context.
        yield* admission.checkTokens("generation", 2000, 48)
        const over = yield* Effect.flip(admission.checkTokens("generation", 2000, 49))
        assert.strictEqual(over._tag, "ContextExceeded")
        if (over._tag === "ContextExceeded") assert.strictEqual(over.admittedContext, 2048)
      }))

    it.effect("a budget that fits nothing fails with what each role needed and what was available", () =>
      Effect.gen(function*() {
        const base = config({})
        const gen = yield* needs(generation, 8192, base)
        const dec = yield* needs(decision, 1024, base)
        const capBytes = dec.get(256)! + gen.get(256)! + base.workspaceReservationBytes - 1
        const admission = yield* admissionWith({ ...base, capBytes })
        const error = yield* Effect.flip(
          admitContexts(admission, { generation: { modelPath: generation }, decision: { modelPath: decision } })
        )
        assert.strictEqual(error._tag, "ContextAdmissionFailed")
        if (error._tag !== "ContextAdmissionFailed") return
        assert.strictEqual(error.availableBytes, capBytes)
        assert.strictEqual(error.reservationBytes, base.workspaceReservationBytes)
        const room = capBytes - base.workspaceReservationBytes
        assert.deepStrictEqual(error.roles.map((r) => [r.role, r.modelPath, r.contextSize, r.neededBytes, r.availableBytes]), [
          ["decision", decision, 256, dec.get(256)!, room - gen.get(256)!],
          ["generation", generation, 256, gen.get(256)!, room - dec.get(256)!]
        ])
        assert.match(error.message, /no context fits the device: decision .* needs \d+ bytes/)
        assert.deepStrictEqual(yield* admission.admitted, Option.none())
      }))

    it.effect("an ample budget keeps the exact cap off the block grid, and stops at the trained context", () =>
      Effect.gen(function*() {
        const admission = yield* admissionWith(config({ capBytes: 4096 * MiB }))
        const admitted = yield* admitContexts(admission, {
          generation: { modelPath: generation, cap: 16384, sequences: 2 },
          decision: { modelPath: decision, cap: 1000 }
        })
        assert.deepStrictEqual(admitted.roles.map((r) => [r.role, r.contextSize, r.limitedBy]), [
          ["decision", 1000, "cap"],
          ["generation", 8192, "trainedContext"]
        ])
        const bad = yield* Effect.flip(admitContexts(admission, { generation: { modelPath: generation, cap: 0 } }))
        assert.strictEqual(bad._tag, "InvalidContextCap")
      }))

    it.effect("the default configuration budgets the inventory's free memory minus headroom", () =>
      Effect.gen(function*() {
        const worker = yield* NativeWorker
        const { devices } = yield* worker.readiness
        const admission = yield* admissionWith(Admission.AdmissionConfig.defaults)
        const device = devices.find((d) => d.kind === "cpu")!
        const budget = yield* admission.device
        assert.strictEqual(budget.source, "inventory")
        assert.strictEqual(budget.budgetBytes, Math.max(0, device.freeBytes - 512 * MiB))
        const admitted = yield* admitContexts(admission, { generation: { modelPath: generation }, decision: { modelPath: decision } })
        assert.deepStrictEqual(admitted.roles.map((r) => [r.role, r.contextSize]), [["decision", 4096], ["generation", 8192]])
      }))

    it.effect("the runtime loads each role at the context admission admits, charged before the load", () =>
      Effect.gen(function*() {
        const base = config({})
        // The runtime's generation context has one sequence per scheduler slot.
        const gen = yield* needs(generation, 8192, base, sequences)
        const dec = yield* needs(decision, 1024, base)
        const capBytes = dec.get(1024)! + gen.get(2048)! + base.workspaceReservationBytes
        for (const [size, need] of gen) if (size > 2048) assert.isAbove(need, gen.get(2048)!, `size ${size}`)
        const runtime = Runtime.layerWithModels({ generation, decision }, {
          admission: { ...base, capBytes },
          worker: { child: testChild, childEnv: testRunEnv, stopTimeout: Duration.seconds(3) }
        })
        yield* Effect.scoped(Effect.gen(function*() {
          const context = yield* Layer.build(runtime)
          const provider = Context.get(context, Provider)
          const ready = yield* provider.readiness
          assert.deepStrictEqual(ready.roles.map((r) => [r.role, r.admittedContext, r.contextCap, r.limitedBy]), [
            ["generation", 2048, 8192, "budget"],
            ["decision", 1024, 1024, "cap"]
          ])
          // What the child really loaded.
          const worker = yield* Context.get(context, NativeWorker).readiness
          assert.deepStrictEqual(worker.models.map((m) => [m.role, m.contextSize]), [["generation", 2048], ["decision", 1024]])
          // Both roles are charged (with margin, which covered the measured growth), leaving the reservation.
          assert.strictEqual(ready.budget?.budgetBytes, capBytes)
          assert.strictEqual(ready.budget?.chargedBytes, capBytes - base.workspaceReservationBytes)
          assert.strictEqual((yield* provider.count({ text: "x" })).admittedContext, 2048)
        }))
      }))

    it.effect("a runtime whose budget fits nothing fails to start with what each role needed (no restart loop)", () =>
      Effect.gen(function*() {
        const base = config({})
        const gen = yield* needs(generation, 8192, base, sequences)
        const dec = yield* needs(decision, 1024, base)
        const capBytes = dec.get(256)! + gen.get(256)! + base.workspaceReservationBytes - 1
        const runtime = Runtime.layerWithModels({ generation, decision }, {
          admission: { ...base, capBytes },
          worker: { child: testChild, childEnv: testRunEnv, stopTimeout: Duration.seconds(3) }
        })
        const error = yield* Effect.flip(Effect.scoped(Layer.build(runtime)))
        assert.strictEqual(error._tag, "ContextAdmissionFailed")
        assert.match(error.message, /no context fits the device: decision .* needs \d+ bytes .* at 256 tokens/)
      }))

    it.effect("measured growth above the charge is charged: with no plan margin, the child's real RSS growth raises the charge", () =>
      Effect.gen(function*() {
        const base = config({ planMargin: { ratio: 0, bytesPerModel: 0 } })
        yield* Effect.scoped(Effect.gen(function*() {
          const context = yield* Layer.build(Runtime.layerWithModels({ generation, decision }, {
            admission: { ...base, capBytes: 2048 * MiB },
            worker: { child: testChild, childEnv: testRunEnv, stopTimeout: Duration.seconds(3) }
          }))
          const status = yield* Context.get(context, Admission.Admission).status
          const resident = status.admitted!.residentBytes
          // The bare plan misses the process's per-load overhead (docs/decisions.md: 5-20 MiB).
          assert.isAbove(status.chargedBytes, resident)
          assert.strictEqual(status.byKind.kv.count, 2)
          yield* Effect.sync(() =>
            console.info(`bare plan ${(resident / MiB).toFixed(1)} MiB, charged after reconcile ${(status.chargedBytes / MiB).toFixed(1)} MiB`)
          )
        }))
      }))
  })
})
