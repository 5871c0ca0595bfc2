/**
 * The Provider's configuration: the prefill chunk that preparation aligns to (it must be the
 * engine's own, NativeWorkerConfig.prefillChunk); its default, a layer from a partial
 * configuration, and a layer from the environment (NATIVEGEN_PREFILL_CHUNK).
 */
import * as Config from "effect/Config"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"

export interface ProviderConfigShape {
  /** Tokens per engine prefill chunk; preparation prefills whole chunks only. Default 128. */
  readonly prefillChunk: number
}

export class ProviderConfig extends Context.Tag("nativegen/ProviderConfig")<ProviderConfig, ProviderConfigShape>() {
  static readonly defaults: ProviderConfigShape = { prefillChunk: 128 }

  static readonly layer = (config: Partial<ProviderConfigShape> = {}) =>
    Layer.succeed(ProviderConfig, { ...ProviderConfig.defaults, ...config })

  static readonly layerDefaults: Layer.Layer<ProviderConfig> = ProviderConfig.layer()

  /** Reads NATIVEGEN_PREFILL_CHUNK from the current ConfigProvider (the environment by default). */
  static readonly config: Config.Config<ProviderConfigShape> = Config.all({
    prefillChunk: Config.integer("NATIVEGEN_PREFILL_CHUNK").pipe(
      Config.withDefault(ProviderConfig.defaults.prefillChunk),
      Config.withDescription("tokens per engine prefill chunk")
    )
  })

  /** The configuration from the process environment, whatever ConfigProvider is current. */
  static readonly configFromEnv = Effect.withConfigProvider(ProviderConfig.config, ConfigProvider.fromEnv())

  /** From the current ConfigProvider. */
  static readonly layerConfig = Layer.effect(ProviderConfig, ProviderConfig.config)

  /** From the process environment, with `overrides` on top. */
  static readonly layerFromEnv = (overrides: Partial<ProviderConfigShape> = {}) =>
    Layer.effect(ProviderConfig, Effect.map(ProviderConfig.configFromEnv, (c) => ({ ...c, ...overrides })))
}
