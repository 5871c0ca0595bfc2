/**
 * The Provider's configuration: the prefill chunk that preparation aligns to (it must be the
 * engine's own, NativeWorkerConfig.prefillChunk); its default, a layer from a partial
 * configuration, and a layer from the environment (NATIVEGEN_PREFILL_CHUNK).
 */
import * as Config from "effect/Config"
import * as Context from "effect/Context"
import { configLayers, fromEnv, setting } from "../../internal/ConfigLayers.js"

export interface ProviderConfigShape {
  /** Tokens per engine prefill chunk; preparation prefills whole chunks only. Default 128. */
  readonly prefillChunk: number
}

const defaults: ProviderConfigShape = { prefillChunk: 128 }

const config: Config.Config<ProviderConfigShape> = Config.all({
  prefillChunk: setting("integer", "NATIVEGEN_PREFILL_CHUNK", defaults.prefillChunk, "tokens per engine prefill chunk")
})

export class ProviderConfig extends Context.Tag("nativegen/ProviderConfig")<ProviderConfig, ProviderConfigShape>() {
  static readonly defaults: ProviderConfigShape = defaults

  /** Reads NATIVEGEN_PREFILL_CHUNK from the current ConfigProvider (the environment by default). */
  static readonly config: Config.Config<ProviderConfigShape> = config

  private static readonly layers = configLayers(ProviderConfig, { defaults: () => defaults, config, env: fromEnv() })

  static readonly layer = ProviderConfig.layers.layer
  static readonly layerDefaults = ProviderConfig.layers.layerDefaults
  /** The configuration from the process environment, whatever ConfigProvider is current. */
  static readonly configFromEnv = ProviderConfig.layers.configFromEnv
  /** From the current ConfigProvider. */
  static readonly layerConfig = ProviderConfig.layers.layerConfig()
  /** From the process environment, with `overrides` on top. */
  static readonly layerFromEnv = ProviderConfig.layers.layerFromEnv
}
