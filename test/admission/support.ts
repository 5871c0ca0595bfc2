/** Admission over a fake device with an exact budget, for ledger tests that need no engine. */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import { EngineUnavailable } from "../../src/domain/EngineError.js"
import { DeviceInfo } from "../../src/native/Protocol.js"
import * as Admission from "../../src/services/Admission.js"

export const fakeDevice = (freeBytes: number, kind: "cpu" | "gpu" = "cpu") =>
  new DeviceInfo({ name: `fake-${kind}`, kind, totalBytes: freeBytes * 2, freeBytes })

/** A planner that must not be called. */
export const noPlanner: Admission.Planner = () => Effect.fail(new EngineUnavailable({ reason: "no engine in this test" }))

/** Admission.layer over one device, its inventory published by hand (no engine child). */
export const admissionLayer = (
  device: DeviceInfo,
  config: Partial<Admission.AdmissionConfigShape> = {}
) =>
  Admission.layer.pipe(
    Layer.provide(Admission.DeviceInventory.layerPublished({ backend: device.kind === "cpu" ? "cpu" : "vulkan", devices: [device] })),
    Layer.provide(Admission.AdmissionConfig.layer(config)),
    Layer.orDie
  )

/** Admission with exactly `budgetBytes` of budget (an explicit cap), logs above warnings muted. */
export const makeLedger = (budgetBytes: number, config: Partial<Admission.AdmissionConfigShape> = {}) =>
  Admission.Admission.pipe(
    Effect.provide(admissionLayer(fakeDevice(budgetBytes * 4), { capBytes: budgetBytes, ...config })),
    Logger.withMinimumLogLevel(LogLevel.Error)
  )
