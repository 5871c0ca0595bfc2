/**
 * DeviceInventory: the devices the engine allocates on, as the first engine child reported them
 * in its hello. The live worker admission publishes each child's hello here; the first publication
 * wins, so a replacement child never sees the memory its dying predecessor still holds. Admission
 * reads its device budget from it when first needed.
 */
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Option from "effect/Option"
import type { DeviceInfo } from "../native/Protocol.js"
import { DeviceNotFound } from "./AdmissionError.js"

/** What a child's hello says about its devices. */
export interface InventorySource {
  readonly backend: string
  readonly devices: ReadonlyArray<DeviceInfo>
}

/** A published inventory and the device its backend allocates on. */
export interface Inventory extends InventorySource {
  readonly device: DeviceInfo
}

export class DeviceInventory extends Context.Tag("nativegen/DeviceInventory")<DeviceInventory, {
  /**
   * Publishes a child's inventory. The first publication that names a usable device wins; later
   * ones change nothing. Returns the inventory in force, or DeviceNotFound when this one has no
   * device for its backend and none was published before.
   */
  readonly publish: (source: InventorySource) => Effect.Effect<Inventory, DeviceNotFound>
  /** The inventory in force, waiting until one is published. */
  readonly inventory: Effect.Effect<Inventory>
  /** The inventory in force, if one was published. */
  readonly current: Effect.Effect<Option.Option<Inventory>>
}>() {
  /** Nothing published yet: the first engine child's hello will be. */
  static readonly layer: Layer.Layer<DeviceInventory> = Layer.effect(DeviceInventory, Effect.suspend(() => make))

  /** An inventory published at construction (tests, or an embedder that knows its device). */
  static readonly layerPublished = (source: InventorySource): Layer.Layer<DeviceInventory, DeviceNotFound> =>
    Layer.effect(
      DeviceInventory,
      Effect.gen(function*() {
        const inventory = yield* make
        yield* inventory.publish(source)
        return inventory
      })
    )
}

/** The device of an engine's inventory that its backend allocates on. */
export const selectDevice = (
  backend: string,
  devices: ReadonlyArray<DeviceInfo>
): Effect.Effect<DeviceInfo, DeviceNotFound> => {
  const kind = backend === "cpu" ? "cpu" : "gpu"
  const found = devices.find((d) => d.kind === kind)
  return found === undefined
    ? Effect.fail(new DeviceNotFound({ backend, devices: devices.map((d) => `${d.name} (${d.kind})`) }))
    : Effect.succeed(found)
}

export const make: Effect.Effect<DeviceInventory["Type"]> = Effect.map(Deferred.make<Inventory>(), (published) =>
  DeviceInventory.of({
    publish: (source) =>
      Effect.flatMap(Deferred.poll(published), (done) =>
        done._tag === "Some"
          ? done.value
          : Effect.flatMap(selectDevice(source.backend, source.devices), (device) =>
            // Two publications racing: whichever completes the Deferred first is in force.
            Effect.zipRight(
              Deferred.succeed(published, { backend: source.backend, devices: source.devices, device }),
              Deferred.await(published)
            ))),
    inventory: Deferred.await(published),
    current: Effect.flatMap(Deferred.poll(published), (done) =>
      done._tag === "Some" ? Effect.asSome(done.value) : Effect.succeedNone)
  }))
