/**
 * The Scheduler's configuration: conversation and anonymous slots, the queue bound and timeout,
 * and the workspace charged per request; its defaults, a layer from a partial configuration, and
 * a layer from the environment (NATIVEGEN_SCHEDULER_*).
 */
import * as Config from "effect/Config"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import { configLayers, fromEnv, setting } from "../../internal/ConfigLayers.js"

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

const defaults: SchedulerConfigShape = {
  slots: 2,
  anonymousSlots: 1,
  maxQueued: 64,
  queueTimeout: Duration.seconds(60),
  generationWorkspaceBytes: 16 * MiB,
  decisionWorkspaceBytesPerHead: 64 * MiB
}

const config: Config.Config<SchedulerConfigShape> = Config.all({
  slots: setting("integer", "NATIVEGEN_SCHEDULER_SLOTS", defaults.slots, "generation sequences that conversations own"),
  anonymousSlots: setting(
    "integer",
    "NATIVEGEN_SCHEDULER_ANONYMOUS_SLOTS",
    defaults.anonymousSlots,
    "generation sequences for requests without a conversation"
  ),
  maxQueued: setting("integer", "NATIVEGEN_SCHEDULER_MAX_QUEUED", defaults.maxQueued, "requests that may wait at once"),
  queueTimeout: setting(
    "duration",
    "NATIVEGEN_SCHEDULER_QUEUE_TIMEOUT",
    defaults.queueTimeout,
    "how long a request may wait for its slot, the engine and its workspace"
  ),
  generationWorkspaceBytes: setting(
    "integer",
    "NATIVEGEN_SCHEDULER_GENERATION_WORKSPACE_BYTES",
    defaults.generationWorkspaceBytes,
    "workspace charged per generation, in bytes"
  ),
  decisionWorkspaceBytesPerHead: setting(
    "integer",
    "NATIVEGEN_SCHEDULER_DECISION_WORKSPACE_BYTES_PER_HEAD",
    defaults.decisionWorkspaceBytesPerHead,
    "workspace charged per decision head, in bytes"
  )
})

export class SchedulerConfig extends Context.Tag("nativegen/SchedulerConfig")<SchedulerConfig, SchedulerConfigShape>() {
  static readonly defaults: SchedulerConfigShape = defaults

  /** Reads NATIVEGEN_SCHEDULER_* from the current ConfigProvider (the environment by default). */
  static readonly config: Config.Config<SchedulerConfigShape> = config

  private static readonly layers = configLayers(SchedulerConfig, { defaults: () => defaults, config, env: fromEnv() })

  static readonly layer = SchedulerConfig.layers.layer
  static readonly layerDefaults = SchedulerConfig.layers.layerDefaults
  /** The configuration from the process environment, whatever ConfigProvider is current. */
  static readonly configFromEnv = SchedulerConfig.layers.configFromEnv
  /** From the current ConfigProvider. */
  static readonly layerConfig = SchedulerConfig.layers.layerConfig()
  /** From the process environment, with `overrides` on top. */
  static readonly layerFromEnv = SchedulerConfig.layers.layerFromEnv
}
