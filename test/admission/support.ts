/** Admission over a fake device with an exact budget, for ledger tests that need no engine. */
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import { EngineUnavailable } from "../../src/domain/EngineError.js"
import { DeviceInfo } from "../../src/native/Protocol.js"
import * as Admission from "../../src/services/Admission.js"

export const fakeDevice = (freeBytes: number, kind: "cpu" | "gpu" = "cpu") =>
  new DeviceInfo({ name: `fake-${kind}`, kind, totalBytes: freeBytes * 2, freeBytes })

/** A planner that must not be called. */
export const noPlanner: Admission.Planner = () => Effect.fail(new EngineUnavailable({ reason: "no engine in this test" }))

/** Admission with exactly `budgetBytes` of budget (an explicit cap), logs above warnings muted. */
export const makeLedger = (budgetBytes: number, config: Partial<Admission.AdmissionConfigShape> = {}) =>
  Admission.makeWith({ device: fakeDevice(budgetBytes * 4), plan: noPlanner }).pipe(
    Effect.provideService(Admission.AdmissionConfig, {
      ...Admission.AdmissionConfig.defaults,
      capBytes: budgetBytes,
      ...config
    }),
    Logger.withMinimumLogLevel(LogLevel.Error)
  )
