/**
 * DeviceInventory and Admission built from layers without an engine: the first publication wins,
 * a publication with no device for its backend changes nothing, and Admission.layer builds before
 * any inventory exists and reads its budget from the inventory once it is published.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Admission from "../../src/services/Admission.js"
import { DeviceInventory } from "../../src/services/DeviceInventory.js"
import { fakeDevice } from "./support.js"

const MiB = 1024 * 1024

describe("DeviceInventory", () => {
  it.effect("the first publication wins: a later child's inventory changes nothing", () =>
    Effect.gen(function*() {
      const inventory = yield* DeviceInventory
      assert.deepStrictEqual(yield* inventory.current, Option.none())
      const first = fakeDevice(1000 * MiB)
      const later = fakeDevice(10 * MiB)
      const published = yield* inventory.publish({ backend: "cpu", devices: [first] })
      assert.strictEqual(published.device, first)
      const again = yield* inventory.publish({ backend: "cpu", devices: [later] })
      assert.strictEqual(again.device, first)
      assert.strictEqual((yield* inventory.inventory).device, first)
    }).pipe(Effect.provide(DeviceInventory.layer)))

  it.effect("a publication with no device for its backend fails and leaves the inventory unpublished", () =>
    Effect.gen(function*() {
      const inventory = yield* DeviceInventory
      const error = yield* Effect.flip(inventory.publish({ backend: "vulkan", devices: [fakeDevice(MiB, "cpu")] }))
      assert.strictEqual(error._tag, "DeviceNotFound")
      assert.deepStrictEqual(error.devices, ["fake-cpu (cpu)"])
      assert.deepStrictEqual(yield* inventory.current, Option.none())
      const gpu = fakeDevice(MiB, "gpu")
      assert.strictEqual((yield* inventory.publish({ backend: "vulkan", devices: [fakeDevice(MiB, "cpu"), gpu] })).device, gpu)
    }).pipe(Effect.provide(DeviceInventory.layer)))
})

describe("Admission.layer over a DeviceInventory", () => {
  const inventory = DeviceInventory.layer
  const graph = Layer.merge(
    Admission.layer.pipe(Layer.provide(inventory), Layer.provide(Admission.AdmissionConfig.layer({ headroomBytes: 100 * MiB }))),
    inventory
  )

  it.effect("builds before any inventory; its budget is read from the first publication, when first needed", () =>
    Effect.gen(function*() {
      const admission = yield* Admission.Admission
      const status = yield* Effect.fork(admission.status)
      yield* Effect.yieldNow()
      assert.isTrue(Option.isNone(yield* Fiber.poll(status)), "status waits for the inventory")
      const device = fakeDevice(1000 * MiB)
      yield* Effect.flatMap(DeviceInventory, (i) => i.publish({ backend: "cpu", devices: [device] }))
      const s = yield* Fiber.join(status)
      assert.deepStrictEqual([s.device.source, s.budgetBytes, s.chargedBytes], ["inventory", 900 * MiB, 0])
      // A later publication (a replacement child, with less free memory) does not move the budget.
      yield* Effect.flatMap(DeviceInventory, (i) => i.publish({ backend: "cpu", devices: [fakeDevice(200 * MiB)] }))
      assert.strictEqual((yield* admission.device).budgetBytes, 900 * MiB)
    }).pipe(Effect.provide(graph)))
})
