/**
 * The shape every config module shares, written once: a setting read from `effect/Config` with its
 * default and description (`setting`), the environment's providers (`fromEnv`), and the layers of
 * a config Tag (`configLayers`: `layer`, `layerDefaults`, `configFromEnv`, `layerConfig`,
 * `layerFromEnv`; `configLayersWith` where options merge by a rule of their own).
 */
import * as Config from "effect/Config"
import type { ConfigError } from "effect/ConfigError"
import * as ConfigProvider from "effect/ConfigProvider"
import type * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"

/** What each kind of setting reads. */
interface SettingValue {
  readonly integer: number
  readonly number: number
  readonly string: string
  readonly boolean: boolean
  readonly duration: Duration.Duration
}

export type SettingKind = keyof SettingValue

const readers: { readonly [K in SettingKind]: (name: string) => Config.Config<SettingValue[K]> } = {
  integer: Config.integer,
  number: Config.number,
  string: Config.string,
  boolean: Config.boolean,
  duration: Config.duration
}

/** The setting `name` of this kind, `fallback` when it is not given. */
export const setting = <K extends SettingKind>(
  kind: K,
  name: string,
  fallback: SettingValue[K],
  description: string
): Config.Config<SettingValue[K]> =>
  readers[kind](name).pipe(Config.withDefault(fallback), Config.withDescription(description))

/**
 * The process environment: variables named as the settings are, or, given a prefix, settings
 * named in camelCase read as `PREFIX_CONSTANT_CASE` (`maxSaved` under `NATIVEGEN_CONVERSATIONS`:
 * `NATIVEGEN_CONVERSATIONS_MAX_SAVED`).
 */
export const fromEnv = (prefix?: string): ConfigProvider.ConfigProvider =>
  prefix === undefined
    ? ConfigProvider.fromEnv()
    : ConfigProvider.fromEnv().pipe(ConfigProvider.constantCase, ConfigProvider.nested(prefix))

/** How a config module's settings come together. */
export interface ConfigSpec<Base, Read extends Partial<Base>, Options, Shape> {
  /** The defaults (a function: some depend on the environment when the layer is built). */
  readonly defaults: () => Base
  /** The settings read from configuration (some or all of them). */
  readonly config: Config.Config<Read>
  /** The provider that `configFromEnv` and `layerFromEnv` read. */
  readonly env: ConfigProvider.ConfigProvider
  /** The settings: `options` over `base` (the defaults, with what was read over them). */
  readonly make: (options: Options, base: Base) => Shape
}

/** The layers of a config Tag. */
export interface ConfigLayersOf<Id, Read, Options> {
  /** `options` over the defaults. */
  readonly layer: (options: Options) => Layer.Layer<Id>
  /** `config` read from `env`, whatever ConfigProvider is current. */
  readonly configFromEnv: Effect.Effect<Read, ConfigError>
  /** `options` over `config` (the current ConfigProvider) over the defaults. */
  readonly layerConfig: (options: Options) => Layer.Layer<Id, ConfigError>
  /** `options` over `config` read from `env` over the defaults. */
  readonly layerFromEnv: (options: Options) => Layer.Layer<Id, ConfigError>
}

/** The layers of a config Tag whose options merge by `spec.make`. */
export const configLayersWith = <Id, Shape, Base, Read extends Partial<Base>, Options>(
  tag: Context.Tag<Id, Shape>,
  spec: ConfigSpec<Base, Read, Options, Shape>
): ConfigLayersOf<Id, Read, Options> => {
  const overRead = (options: Options) => (read: Read) => spec.make(options, { ...spec.defaults(), ...read })
  const configFromEnv = Effect.withConfigProvider(spec.config, spec.env)
  return {
    layer: (options) => Layer.sync(tag, () => spec.make(options, spec.defaults())),
    configFromEnv,
    layerConfig: (options) => Layer.effect(tag, Effect.map(spec.config, overRead(options))),
    layerFromEnv: (options) => Layer.effect(tag, Effect.map(configFromEnv, overRead(options)))
  }
}

/** The layers of a config Tag whose options are any of its settings, each over the default. */
export interface PartialConfigLayers<Id, Shape, Read> {
  readonly layer: (options?: Partial<Shape>) => Layer.Layer<Id>
  readonly layerDefaults: Layer.Layer<Id>
  readonly configFromEnv: Effect.Effect<Read, ConfigError>
  readonly layerConfig: (options?: Partial<Shape>) => Layer.Layer<Id, ConfigError>
  readonly layerFromEnv: (options?: Partial<Shape>) => Layer.Layer<Id, ConfigError>
}

/** The layers of a config Tag whose options are any of its settings: `options` over what was read over the defaults. */
export const configLayers = <Id, Shape extends object, Read extends Partial<Shape>>(
  tag: Context.Tag<Id, Shape>,
  spec: Omit<ConfigSpec<Shape, Read, Partial<Shape>, Shape>, "make">
): PartialConfigLayers<Id, Shape, Read> => {
  const layers = configLayersWith(tag, { ...spec, make: (options: Partial<Shape>, base: Shape) => ({ ...base, ...options }) })
  return {
    layer: (options = {}) => layers.layer(options),
    layerDefaults: layers.layer({}),
    configFromEnv: layers.configFromEnv,
    layerConfig: (options = {}) => layers.layerConfig(options),
    layerFromEnv: (options = {}) => layers.layerFromEnv(options)
  }
}
