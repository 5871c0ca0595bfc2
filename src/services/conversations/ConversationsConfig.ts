/**
 * ConversationsConfig: where conversations' state files go and the bounds on what is kept, shaped
 * like @effect/cluster's ShardingConfig: the Tag, `defaults`, `layer(options)` over the defaults,
 * and `config`/`layerFromEnv` reading `NATIVEGEN_CONVERSATIONS_*`.
 *
 * The model digest has no default: it names the model whose state files these are (state files of
 * any other model are refused), so it comes from the model the runtime loads, never from the
 * environment.
 */
import * as Config from "effect/Config"
import type { ConfigError } from "effect/ConfigError"
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import type * as Layer from "effect/Layer"
import { configLayersWith, fromEnv, setting } from "../../internal/ConfigLayers.js"

export interface ConversationsConfigShape {
  /** Where state files live (one subdirectory per model digest); undefined: nothing is saved. */
  readonly directory: string | undefined
  /** sha256 of the generation model: state files of any other model are refused. */
  readonly modelDigest: string
  /** State files kept per model; the least recently saved beyond this are deleted. */
  readonly maxSaved: number
  /** Refused state files kept (moved aside) per model, newest first. */
  readonly maxMovedAside: number
  /** Conversations whose token record is held in memory, least recently used dropped first. */
  readonly maxHeldConversations: number
  /** Bytes of token records held in memory (4 per token, plus 160 and the id per conversation). */
  readonly maxHeldBytes: number
}

export class ConversationsConfig extends Context.Tag("nativegen/ConversationsConfig")<
  ConversationsConfig,
  ConversationsConfigShape
>() {}

/** Everything but the model digest: nothing saved, 32 state files, 8 moved aside, 4,096 records, 64 MiB. */
export const defaults: Omit<ConversationsConfigShape, "modelDigest"> = {
  directory: undefined,
  maxSaved: 32,
  maxMovedAside: 8,
  maxHeldConversations: 4_096,
  maxHeldBytes: 64 * 1024 * 1024
}

/** The model digest, and any other setting; one left out or given as undefined keeps its default. */
export type Options =
  & { readonly modelDigest: string }
  & { readonly [K in Exclude<keyof ConversationsConfigShape, "modelDigest">]?: ConversationsConfigShape[K] | undefined }

/** The settings: `options` over `base` (the defaults unless given). */
export const make = (options: Options, base: Omit<ConversationsConfigShape, "modelDigest"> = defaults): ConversationsConfigShape => ({
  directory: options.directory ?? base.directory,
  modelDigest: options.modelDigest,
  maxSaved: options.maxSaved ?? base.maxSaved,
  maxMovedAside: options.maxMovedAside ?? base.maxMovedAside,
  maxHeldConversations: options.maxHeldConversations ?? base.maxHeldConversations,
  maxHeldBytes: options.maxHeldBytes ?? base.maxHeldBytes
})

const count = (name: string, fallback: number, description: string) =>
  setting("integer", name, fallback, description).pipe(
    Config.validate({ message: `${name} must be a whole number of at least 0`, validation: (n) => n >= 0 })
  )

/** Every setting but the model digest, from the Config provider. */
export const config: Config.Config<Omit<ConversationsConfigShape, "modelDigest">> = Config.all({
  directory: Config.string("directory").pipe(
    Config.option,
    Config.map((directory) => directory._tag === "Some" ? directory.value : undefined),
    Config.withDescription("Where conversations' state files go; unset: nothing is saved")
  ),
  maxSaved: count("maxSaved", defaults.maxSaved, "State files kept per model"),
  maxMovedAside: count("maxMovedAside", defaults.maxMovedAside, "Refused state files kept (moved aside) per model"),
  maxHeldConversations: count("maxHeldConversations", defaults.maxHeldConversations, "Token records held in memory"),
  maxHeldBytes: count("maxHeldBytes", defaults.maxHeldBytes, "Bytes of token records held in memory")
})

const layers = configLayersWith(ConversationsConfig, {
  defaults: () => defaults,
  config,
  env: fromEnv("NATIVEGEN_CONVERSATIONS"),
  make
})

export const layer: (options: Options) => Layer.Layer<ConversationsConfig> = layers.layer

/** `config` from the environment: `NATIVEGEN_CONVERSATIONS_DIRECTORY`, `NATIVEGEN_CONVERSATIONS_MAX_SAVED`, ... */
export const configFromEnv: Effect.Effect<Omit<ConversationsConfigShape, "modelDigest">, ConfigError> = layers.configFromEnv

/** The settings from the environment, `options` over them (the model digest always from `options`; a setting given as undefined keeps the environment's). */
export const layerFromEnv: (options: Options) => Layer.Layer<ConversationsConfig, ConfigError> = layers.layerFromEnv
