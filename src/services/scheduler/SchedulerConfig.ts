/**
 * The Scheduler's configuration: conversation and anonymous slots, the queue bound and timeout,
 * and the workspace charged per request; its defaults, a layer from a partial configuration, and
 * a layer from the environment (NATIVEGEN_SCHEDULER_*).
 */
import * as Config from "effect/Config"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"

const MiB = 1024 * 1024

export interface SchedulerConfigShape {
  /** Sequences (slots) of the generation context that conversations own, LRU. Default 2. */
  readonly slots: number
  /**
   * Further sequences for requests without a conversation (utility calls, one-off prompts): they
   * never take, evict or disturb a conversation's slot. Default 1.
   */
  readonly anonymousSlots: number
  /** Requests that may wait at once (all lanes); one more is refused with QueueFull. Default 64. */
  readonly maxQueued: number
  /** How long a request may wait for its slot, the engine and its workspace. Default 60 s. */
  readonly queueTimeout: Duration.Duration
  /** Transient workspace charged per generation (sampling, logits, batch arrays). Default 16 MiB. */
  readonly generationWorkspaceBytes: number
  /** Transient workspace charged per decision head (its label rows of logits). Default 64 MiB. */
  readonly decisionWorkspaceBytesPerHead: number
}

export class SchedulerConfig extends Context.Tag("nativegen/SchedulerConfig")<SchedulerConfig, SchedulerConfigShape>() {
  static readonly defaults: SchedulerConfigShape = {
    slots: 2,
    anonymousSlots: 1,
    maxQueued: 64,
    queueTimeout: Duration.seconds(60),
    generationWorkspaceBytes: 16 * MiB,
    decisionWorkspaceBytesPerHead: 64 * MiB
  }

  static readonly layer = (config: Partial<SchedulerConfigShape> = {}) =>
    Layer.succeed(SchedulerConfig, { ...SchedulerConfig.defaults, ...config })

  static readonly layerDefaults: Layer.Layer<SchedulerConfig> = SchedulerConfig.layer()

  /** Reads NATIVEGEN_SCHEDULER_* from the current ConfigProvider (the environment by default). */
  static readonly config: Config.Config<SchedulerConfigShape> = Config.all({
    slots: Config.integer("NATIVEGEN_SCHEDULER_SLOTS").pipe(
      Config.withDefault(SchedulerConfig.defaults.slots),
      Config.withDescription("generation sequences that conversations own")
    ),
    anonymousSlots: Config.integer("NATIVEGEN_SCHEDULER_ANONYMOUS_SLOTS").pipe(
      Config.withDefault(SchedulerConfig.defaults.anonymousSlots),
      Config.withDescription("generation sequences for requests without a conversation")
    ),
    maxQueued: Config.integer("NATIVEGEN_SCHEDULER_MAX_QUEUED").pipe(
      Config.withDefault(SchedulerConfig.defaults.maxQueued),
      Config.withDescription("requests that may wait at once")
    ),
    queueTimeout: Config.duration("NATIVEGEN_SCHEDULER_QUEUE_TIMEOUT").pipe(
      Config.withDefault(SchedulerConfig.defaults.queueTimeout),
      Config.withDescription("how long a request may wait for its slot, the engine and its workspace")
    ),
    generationWorkspaceBytes: Config.integer("NATIVEGEN_SCHEDULER_GENERATION_WORKSPACE_BYTES").pipe(
      Config.withDefault(SchedulerConfig.defaults.generationWorkspaceBytes),
      Config.withDescription("workspace charged per generation, in bytes")
    ),
    decisionWorkspaceBytesPerHead: Config.integer("NATIVEGEN_SCHEDULER_DECISION_WORKSPACE_BYTES_PER_HEAD").pipe(
      Config.withDefault(SchedulerConfig.defaults.decisionWorkspaceBytesPerHead),
      Config.withDescription("workspace charged per decision head, in bytes")
    )
  })

  /** The configuration from the process environment, whatever ConfigProvider is current. */
  static readonly configFromEnv = Effect.withConfigProvider(SchedulerConfig.config, ConfigProvider.fromEnv())

  /** From the current ConfigProvider. */
  static readonly layerConfig = Layer.effect(SchedulerConfig, SchedulerConfig.config)

  /** From the process environment, with `overrides` on top. */
  static readonly layerFromEnv = (overrides: Partial<SchedulerConfigShape> = {}) =>
    Layer.effect(SchedulerConfig, Effect.map(SchedulerConfig.configFromEnv, (c) => ({ ...c, ...overrides })))
}
