/**
 * StoreConfig (src/services/store/StoreConfig.ts): options over the defaults; `layerConfig` reads the
 * current Config provider; `layerFromEnv` reads NATIVEGEN_STORE_* from the environment; options win.
 */
import { assert, describe, it } from "@effect/vitest"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Store from "../../src/services/Store.js"
import { withEnv } from "../support/env.js"

const { StoreConfig } = Store

const read = (layer: Layer.Layer<Store.StoreConfig, unknown>) => Effect.provide(StoreConfig, layer)

describe("StoreConfig", () => {
  it.effect("layer: the options over the defaults", () =>
    Effect.gen(function*() {
      const config = yield* read(StoreConfig.layer({ root: "/tmp/a-store", device: "gpu:0" }))
      const defaults = StoreConfig.defaults()
      assert.deepStrictEqual({ ...config, seed: undefined }, { ...defaults, root: "/tmp/a-store", device: "gpu:0", seed: undefined })
      assert.strictEqual(config.seed, defaults.seed)
    }))

  it.effect("layerConfig: the Config provider over the defaults, the options over both", () =>
    Effect.gen(function*() {
      const provider = ConfigProvider.fromMap(new Map([["maxManifestBytes", "1024"], ["device", "metal"], ["reapGrace", "5 seconds"]]))
      const config = yield* read(
        StoreConfig.layerConfig({ device: "cpu" }).pipe(Layer.provide(Layer.setConfigProvider(provider)))
      )
      assert.strictEqual(config.maxManifestBytes, 1024)
      assert.strictEqual(config.device, "cpu")
      assert.isTrue(Duration.equals(config.reapGrace, Duration.seconds(5)))
      assert.strictEqual(config.trustSeedKey, true)
    }))

  it.scoped("layerFromEnv: NATIVEGEN_STORE_* from the environment, whatever the current provider; the options win", () =>
    Effect.gen(function*() {
      yield* withEnv({ NATIVEGEN_STORE_ROOT: "/tmp/env-store", NATIVEGEN_STORE_MAX_MANIFEST_BYTES: "2048" })
      const provider = ConfigProvider.fromMap(new Map([["root", "/tmp/map-store"]]))
      const config = yield* read(
        StoreConfig.layerFromEnv({ device: "vulkan" }).pipe(Layer.provide(Layer.setConfigProvider(provider)))
      )
      assert.strictEqual(config.root, "/tmp/env-store")
      assert.strictEqual(config.maxManifestBytes, 2048)
      assert.strictEqual(config.device, "vulkan")
    }))

  it.scoped("layerFromEnv: an invalid value fails with a ConfigError naming the variable", () =>
    Effect.gen(function*() {
      yield* withEnv({ NATIVEGEN_STORE_MAX_MANIFEST_BYTES: "lots" })
      const error = yield* Effect.flip(read(StoreConfig.layerFromEnv()))
      assert.include(String(error), "MAX_MANIFEST_BYTES")
    }))
})
