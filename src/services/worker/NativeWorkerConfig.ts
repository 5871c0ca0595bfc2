/**
 * NativeWorker's configuration (shaped like cluster's ShardingConfig): the Tag, its defaults,
 * `layer(partial)`, and `layerConfig`/`layerFromEnv` for the deadlines and the restart budget
 * (`NATIVEGEN_WORKER_*`). The models, child settings and child environment come from code.
 */
import * as Config from "effect/Config"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import { configLayers, fromEnv, setting } from "../../internal/ConfigLayers.js"
import { type ChildSettings, defaultChildSettings } from "../../native/ChildSettings.js"
import type { Role } from "../../native/Protocol.js"
import type { RecoveryAction } from "./Readiness.js"

/** Where a role's model comes from and how it is loaded. */
export interface RoleModel {
  readonly modelPath: string
  readonly contextSize: number
  /** Parallel sequences (conversation slots) in the role's context. Default 1. */
  readonly sequences?: number | undefined
  /** The host-owned revision of this model (its store name, manifest digest and revision), shown in readiness. */
  readonly revision?: { readonly model: string; readonly manifestDigest: string; readonly revision: number } | undefined
}

export interface NativeWorkerConfigShape {
  readonly child: ChildSettings
  readonly models: { readonly [R in Role]?: RoleModel | undefined }
  /** Tokens per prefill chunk: the granularity at which prefill can be paused or cancelled. Default 128. */
  readonly prefillChunk: number
  /** Deadline for each stage of a graceful stop before the next, harder one. Default 5 s. */
  readonly stopTimeout: Duration.Duration
  /** A step or call that makes no progress for this long means the child hangs. Default 30 s. */
  readonly stepDeadline: Duration.Duration
  /** A child that has not answered hello this long after its spawn is stuck. Default 60 s. */
  readonly startDeadline: Duration.Duration
  /** A model load with no load progress for this long means the child hangs. Default 120 s. */
  readonly loadDeadline: Duration.Duration
  /** How often an idle ready child is probed. Default 5 s. */
  readonly heartbeatInterval: Duration.Duration
  /** Failures tolerated within `restartPeriod` before giving up. Default 3. */
  readonly restartIntensity: number
  /** Default 60 s. */
  readonly restartPeriod: Duration.Duration
  /** After the budget is exhausted, wait this long before trying again. Default 30 s. */
  readonly restartBackoff: Duration.Duration
  /** How long a request waits for a ready engine before EngineUnavailable. Default 60 s. */
  readonly readyTimeout: Duration.Duration
  /** Recovery actions kept for readiness. Default 32. */
  readonly recoveryLogLength: number
  /** Recovery actions taken before this worker was made (the runtime's model fallbacks), listed first. Default none. */
  readonly recoveryActions?: ReadonlyArray<RecoveryAction> | undefined
  /**
   * Variables set only in engine children, never in the host (driver settings such as
   * `VK_DRIVER_FILES` or `CUDA_VISIBLE_DEVICES` for the engine alone, test failpoints). Children do
   * not get the host's whole environment: only PATH, HOME, the locale, TMPDIR, and what
   * node-llama-cpp, ggml and the GPU runtimes read (the list is in native/ChildEnvironment.ts),
   * then these, then the child's settings (which these cannot override). Default {}.
   */
  readonly childEnv: Readonly<Record<string, string>>
  /** The Node executable for children; overridable to test spawn failures. */
  readonly execPath?: string | undefined
}

const defaults: NativeWorkerConfigShape = {
  child: defaultChildSettings,
  models: {},
  prefillChunk: 128,
  stopTimeout: Duration.seconds(5),
  stepDeadline: Duration.seconds(30),
  startDeadline: Duration.seconds(60),
  loadDeadline: Duration.seconds(120),
  heartbeatInterval: Duration.seconds(5),
  restartIntensity: 3,
  restartPeriod: Duration.seconds(60),
  restartBackoff: Duration.seconds(30),
  readyTimeout: Duration.seconds(60),
  recoveryLogLength: 32,
  childEnv: {}
}

/** The settings read from configuration: deadlines, intervals and the restart budget. */
type Configured = Pick<
  NativeWorkerConfigShape,
  | "prefillChunk"
  | "stopTimeout"
  | "stepDeadline"
  | "startDeadline"
  | "loadDeadline"
  | "heartbeatInterval"
  | "restartIntensity"
  | "restartPeriod"
  | "restartBackoff"
  | "readyTimeout"
  | "recoveryLogLength"
>

const config: Config.Config<Configured> = Config.all({
  prefillChunk: setting("integer", "prefillChunk", defaults.prefillChunk, "tokens per prefill chunk"),
  stopTimeout: setting("duration", "stopTimeout", defaults.stopTimeout, "deadline of each stage of a child's graceful stop"),
  stepDeadline: setting("duration", "stepDeadline", defaults.stepDeadline, "a step with no progress for this long is a hang"),
  startDeadline: setting("duration", "startDeadline", defaults.startDeadline, "a child not greeting this long after spawn is stuck"),
  loadDeadline: setting("duration", "loadDeadline", defaults.loadDeadline, "a load with no progress for this long is a hang"),
  heartbeatInterval: setting("duration", "heartbeatInterval", defaults.heartbeatInterval, "how often an idle child is probed"),
  restartIntensity: setting("integer", "restartIntensity", defaults.restartIntensity, "failures tolerated within the restart period"),
  restartPeriod: setting("duration", "restartPeriod", defaults.restartPeriod, "the restart budget's window"),
  restartBackoff: setting("duration", "restartBackoff", defaults.restartBackoff, "wait after an exhausted budget"),
  readyTimeout: setting("duration", "readyTimeout", defaults.readyTimeout, "how long a request waits for a ready engine"),
  recoveryLogLength: setting("integer", "recoveryLogLength", defaults.recoveryLogLength, "recovery actions kept for readiness")
})

export class NativeWorkerConfig extends Context.Tag("nativegen/NativeWorkerConfig")<
  NativeWorkerConfig,
  NativeWorkerConfigShape
>() {
  static readonly defaults: NativeWorkerConfigShape = defaults

  /** Deadlines, intervals and the restart budget from the current ConfigProvider. */
  static readonly config = config

  private static readonly layers = configLayers(NativeWorkerConfig, {
    defaults: () => defaults,
    config,
    env: fromEnv("NATIVEGEN_WORKER")
  })

  /** `options` over the defaults. */
  static readonly layer = NativeWorkerConfig.layers.layer

  /** `config` over the defaults, then `options` over both. */
  static readonly layerConfig = NativeWorkerConfig.layers.layerConfig

  /** `NATIVEGEN_WORKER_STEP_DEADLINE`, `NATIVEGEN_WORKER_RESTART_INTENSITY`, ... */
  static readonly layerFromEnv = NativeWorkerConfig.layers.layerFromEnv
}
