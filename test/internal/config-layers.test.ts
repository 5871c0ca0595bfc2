/**
 * The config modules' layers (src/internal/ConfigLayers.ts) as the modules without a test of their
 * own use them: `layer` over the defaults, `layerConfig` from the current provider, `layerFromEnv`
 * from the process environment (plain names, or `PREFIX_CONSTANT_CASE`) with the options on top.
 */
import { assert, describe, it } from "@effect/vitest"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { AdmissionConfig } from "../../src/services/admission/AdmissionConfig.js"
import { ProviderConfig } from "../../src/services/provider/ProviderConfig.js"
import { SchedulerConfig } from "../../src/services/scheduler/SchedulerConfig.js"
import { NativeWorkerConfig } from "../../src/services/worker/NativeWorkerConfig.js"
import { withEnv } from "../support/env.js"

const read = <I, S, E>(tag: Context.Tag<I, S>, layer: Layer.Layer<I, E>) => Effect.provide(tag, layer)

/** A provider that names every setting differently from the environment, to show it is not read. */
const elsewhere = Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["NATIVEGEN_SCHEDULER_SLOTS", "99"]])))

describe("config layers", () => {
  it.effect("layer and layerDefaults: the options over the defaults", () =>
    Effect.gen(function*() {
      assert.deepStrictEqual(yield* read(SchedulerConfig, SchedulerConfig.layerDefaults), SchedulerConfig.defaults)
      const config = yield* read(AdmissionConfig, AdmissionConfig.layer({ headroomBytes: 1 }))
      assert.deepStrictEqual(config, { ...AdmissionConfig.defaults, headroomBytes: 1 })
    }))

  it.effect("layerConfig: from the current provider, over the defaults", () =>
    Effect.gen(function*() {
      const config = yield* read(SchedulerConfig, SchedulerConfig.layerConfig.pipe(Layer.provide(elsewhere)))
      assert.deepStrictEqual(config, { ...SchedulerConfig.defaults, slots: 99 })
      const worker = yield* read(
        NativeWorkerConfig,
        NativeWorkerConfig.layerConfig({ restartIntensity: 7 }).pipe(
          Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["stepDeadline", "3 seconds"], ["restartIntensity", "5"]]))))
        )
      )
      assert.isTrue(Duration.equals(worker.stepDeadline, Duration.seconds(3)))
      assert.strictEqual(worker.restartIntensity, 7)
      assert.strictEqual(worker.models, NativeWorkerConfig.defaults.models)
    }))

  it.scoped("layerFromEnv: the environment whatever the current provider, the options on top", () =>
    Effect.gen(function*() {
      yield* withEnv({
        NATIVEGEN_SCHEDULER_MAX_QUEUED: "3",
        NATIVEGEN_ADMISSION_PLAN_MARGIN_RATIO: "0.25",
        NATIVEGEN_PREFILL_CHUNK: "64",
        NATIVEGEN_WORKER_STEP_DEADLINE: "2 seconds",
        NATIVEGEN_WORKER_PREFILL_CHUNK: "32"
      })
      const scheduler = yield* read(SchedulerConfig, SchedulerConfig.layerFromEnv({ anonymousSlots: 4 }).pipe(Layer.provide(elsewhere)))
      assert.deepStrictEqual(scheduler, { ...SchedulerConfig.defaults, maxQueued: 3, anonymousSlots: 4 })
      const admission = yield* read(AdmissionConfig, AdmissionConfig.layerFromEnv())
      assert.deepStrictEqual(admission.planMargin, { ratio: 0.25, bytesPerModel: AdmissionConfig.defaults.planMargin.bytesPerModel })
      assert.strictEqual(admission.capBytes, undefined)
      assert.deepStrictEqual(yield* ProviderConfig.configFromEnv, { prefillChunk: 64 })
      const worker = yield* read(NativeWorkerConfig, NativeWorkerConfig.layerFromEnv({ prefillChunk: 16 }).pipe(Layer.provide(elsewhere)))
      assert.isTrue(Duration.equals(worker.stepDeadline, Duration.seconds(2)))
      assert.strictEqual(worker.prefillChunk, 16)
      assert.deepStrictEqual(worker.childEnv, {})
    }))

  it.scoped("layerFromEnv: a value of the wrong kind fails with a ConfigError naming the setting", () =>
    Effect.gen(function*() {
      yield* withEnv({ NATIVEGEN_WORKER_RESTART_PERIOD: "often", NATIVEGEN_SCHEDULER_SLOTS: "two" })
      assert.include(String(yield* Effect.flip(read(NativeWorkerConfig, NativeWorkerConfig.layerFromEnv()))), "restartPeriod")
      assert.include(String(yield* Effect.flip(read(SchedulerConfig, SchedulerConfig.layerFromEnv()))), "NATIVEGEN_SCHEDULER_SLOTS")
    }))
})
