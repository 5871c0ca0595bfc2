/**
 * ConversationsConfig (shaped like @effect/cluster's ShardingConfig): `layer` puts the options over
 * the defaults, a setting given as undefined keeps its default; `layerFromEnv` reads
 * `NATIVEGEN_CONVERSATIONS_*`, the options over it; a value that is not a whole number of at least
 * 0 fails with a ConfigError naming the setting.
 */
import { assert, describe, it } from "@effect/vitest"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as ConversationsConfig from "../../src/services/conversations/ConversationsConfig.js"

const settingsOf = <E>(layer: Layer.Layer<ConversationsConfig.ConversationsConfig, E>) =>
  Effect.provide(ConversationsConfig.ConversationsConfig, layer)

/** `configFromEnv`'s provider over a map of environment variables (nothing of the process's own environment). */
const fromEnv = (env: Record<string, string>) =>
  Layer.setConfigProvider(
    ConfigProvider.fromMap(new Map(Object.entries(env)), { pathDelim: "_", seqDelim: "," }).pipe(
      ConfigProvider.constantCase,
      ConfigProvider.nested("NATIVEGEN_CONVERSATIONS")
    )
  )

describe("ConversationsConfig", () => {
  it.effect("layer: the options over the defaults; undefined keeps a default", () =>
    Effect.gen(function*() {
      const settings = yield* settingsOf(ConversationsConfig.layer({ modelDigest: "d", maxSaved: 3, maxHeldBytes: undefined }))
      assert.deepStrictEqual(settings, { ...ConversationsConfig.defaults, modelDigest: "d", maxSaved: 3 })
      assert.isUndefined(settings.directory, "by default nothing is saved")
    }))

  it.effect("config: NATIVEGEN_CONVERSATIONS_* settings, defaults for the rest; layerFromEnv's options over them", () =>
    Effect.gen(function*() {
      const env = fromEnv({
        NATIVEGEN_CONVERSATIONS_DIRECTORY: "/var/lib/nativegen/conversations",
        NATIVEGEN_CONVERSATIONS_MAX_SAVED: "5",
        NATIVEGEN_CONVERSATIONS_MAX_HELD_CONVERSATIONS: "100"
      })
      const read = yield* Effect.provide(ConversationsConfig.config, env)
      assert.deepStrictEqual(read, {
        ...ConversationsConfig.defaults,
        directory: "/var/lib/nativegen/conversations",
        maxSaved: 5,
        maxHeldConversations: 100
      })
      const settings = yield* settingsOf(
        Layer.effect(
          ConversationsConfig.ConversationsConfig,
          Effect.map(ConversationsConfig.config, (config) => ConversationsConfig.make({ modelDigest: "d", maxSaved: 7, directory: undefined }, config))
        ).pipe(Layer.provide(env))
      )
      assert.strictEqual(settings.maxSaved, 7, "an option wins over the environment")
      assert.strictEqual(settings.directory, "/var/lib/nativegen/conversations", "an option given as undefined keeps the environment's")
      assert.strictEqual(settings.modelDigest, "d")
    }))

  it.effect("a setting that is not a whole number of at least 0 is a ConfigError naming it", () =>
    Effect.gen(function*() {
      const negative = yield* Effect.flip(Effect.provide(ConversationsConfig.config, fromEnv({ NATIVEGEN_CONVERSATIONS_MAX_HELD_BYTES: "-1" })))
      assert.include(String(negative), "maxHeldBytes must be a whole number of at least 0")
      const text = yield* Effect.flip(Effect.provide(ConversationsConfig.config, fromEnv({ NATIVEGEN_CONVERSATIONS_MAX_SAVED: "many" })))
      assert.include(String(text), "MAX_SAVED")
    }))

  it.effect("layerFromEnv reads the process environment", () =>
    Effect.gen(function*() {
      const name = "NATIVEGEN_CONVERSATIONS_MAX_MOVED_ASIDE"
      const before = process.env[name]
      process.env[name] = "2"
      const settings = yield* settingsOf(ConversationsConfig.layerFromEnv({ modelDigest: "d" })).pipe(
        Effect.ensuring(Effect.sync(() => {
          if (before === undefined) delete process.env[name]
          else process.env[name] = before
        }))
      )
      assert.strictEqual(settings.maxMovedAside, 2)
      assert.strictEqual(settings.modelDigest, "d")
    }))
})
