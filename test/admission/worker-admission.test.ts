/**
 * The live WorkerAdmission in a worker on the generated models, wired from layers as the runtime
 * wires it (DeviceInventory <- Admission <- WorkerAdmissionLive <- NativeWorker): the first
 * child's inventory sets the budget, each role is charged before its load and reconciled with the
 * measured growth; a replacement child (after SIGKILL) is charged again in its own incarnation,
 * without re-reading the inventory its dying predecessor's memory would skew.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Option from "effect/Option"
import { ensureModel } from "../../fixtures/models.js"
import * as Admission from "../../src/services/Admission.js"
import * as WorkerAdmissionLive from "../../src/services/admission/WorkerAdmissionLive.js"
import { DeviceInventory } from "../../src/services/DeviceInventory.js"
import { ChildResources, NativeWorker } from "../../src/services/NativeWorker.js"
import { awaitGone } from "../support/processes.js"
import { workerLayer } from "../support/engine.js"

const MiB = 1024 * 1024

/** The worker of test/support/engine.ts with the live admission hooks, and what they publish. */
const graph = () => {
  const inventory = DeviceInventory.layer
  const admission = Admission.layer.pipe(
    Layer.provide(inventory),
    // No plan margin: the measured growth is above the bare plan, so reconcile has something to charge.
    Layer.provide(Admission.AdmissionConfig.layer({
      capBytes: 2048 * MiB,
      workspaceReservationBytes: 8 * MiB,
      contextCap: { generation: 4096, decision: 1024 },
      planMargin: { ratio: 0, bytesPerModel: 0 }
    }))
  )
  const hooks = WorkerAdmissionLive.layer({
    generation: { modelPath: ensureModel("tiny"), sequences: 2 },
    decision: { modelPath: ensureModel("decision") }
  }).pipe(Layer.provide(Layer.merge(admission, inventory)))
  return Layer.mergeAll(workerLayer({}, Layer.merge(hooks, ChildResources.layerNoop)), admission, inventory, hooks).pipe(
    Layer.provide(Logger.minimumLogLevel(LogLevel.Error)),
    Layer.fresh
  )
}

describe("WorkerAdmission, live", () => {
  // Real time: the replacement is awaited by polling the dead child's /proc entry.
  layer(graph(), { timeout: 120_000, excludeTestServices: true })("a worker with the live hooks", (it) => {
    it.effect("charges each incarnation's roles in its scope, reconciled with the measured growth; a replacement keeps the first inventory", () =>
      Effect.gen(function*() {
        const worker = yield* NativeWorker
        const admission = yield* Admission.Admission
        const inventory = yield* DeviceInventory
        const first = yield* Effect.flatMap(WorkerAdmissionLive.FirstAdmission, (f) => f.result)
        const before = yield* worker.readiness
        assert.strictEqual(before.state, "ready")
        const published = Option.getOrThrow(yield* inventory.current)
        assert.deepStrictEqual(published.devices, before.devices)
        // Each role loaded at the context admission admitted.
        for (const model of before.models) {
          assert.strictEqual(model.contextSize, first.roles.find((r) => r.role === model.role)?.contextSize, model.role)
        }

        const charged = yield* admission.status
        assert.strictEqual(charged.byKind.weights.count, 2)
        assert.strictEqual(charged.byKind.kv.count, 2)
        // With no margin, what the child really grew by is above the bare plan: reconcile charged it.
        assert.isAbove(charged.chargedBytes, first.residentBytes)

        process.kill(before.pid!, "SIGKILL")
        yield* awaitGone(before.pid!)
        // A call made now waits for the replacement.
        yield* worker.tokenize("generation", "hi")
        const after = yield* worker.readiness
        assert.strictEqual(after.state, "ready")
        assert.notStrictEqual(after.pid, before.pid)
        // The replacement said hello with its own inventory; the one in force is still the first.
        assert.deepStrictEqual(Option.getOrThrow(yield* inventory.current).devices, published.devices)
        assert.strictEqual((yield* admission.device).freeBytes, published.device.freeBytes)
        // The dead incarnation's charges went with its scope; the replacement's are the only ones.
        const recharged = yield* admission.status
        assert.strictEqual(recharged.byKind.weights.count, 2)
        assert.strictEqual(recharged.byKind.kv.count, 2)
        assert.isAbove(recharged.chargedBytes, first.residentBytes)
        assert.deepStrictEqual(recharged.admitted, first)
      }), 120_000)
  })
})
