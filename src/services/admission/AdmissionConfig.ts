/**
 * Admission's configuration: headroom or an explicit cap on the device budget, the workspace
 * reservation, the per-role context caps and the plan margin; its defaults, a layer from a partial
 * configuration, and a layer from the environment (NATIVEGEN_ADMISSION_*).
 */
import * as Config from "effect/Config"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { configLayers, fromEnv, setting } from "../../internal/ConfigLayers.js"
import type { Role } from "../../native/Protocol.js"
import type { PlanMargin } from "./ContextPlanner.js"

const MiB = 1024 * 1024

export interface AdmissionConfigShape {
  /** Bytes of the device's free memory that are never budgeted. Default 512 MiB. */
  readonly headroomBytes: number
  /**
   * An explicit device budget in bytes, used instead of free memory minus headroom (a logical
   * partition of the device). Default: none (the inventory decides).
   */
  readonly capBytes?: number | undefined
  /** Bytes context admission leaves free for per-request workspace. Default 512 MiB (the seed's six-head probes). */
  readonly workspaceReservationBytes: number
  /** Context cap in tokens per role; the exact cap is kept when it fits. Default generation 16384, decision 4096. */
  readonly contextCap: { readonly [R in Role]: number }
  /**
   * Added to the engine's plan before it is charged: `ratio` of every planned amount plus
   * `bytesPerModel` once per resident model. Default 5% and 48 MiB (docs/decisions.md, "Admission
   * charge against measured memory").
   */
  readonly planMargin: PlanMargin
}

const defaults: AdmissionConfigShape = {
  headroomBytes: 512 * MiB,
  workspaceReservationBytes: 512 * MiB,
  contextCap: { generation: 16384, decision: 4096 },
  planMargin: { ratio: 0.05, bytesPerModel: 48 * MiB }
}

const config: Config.Config<AdmissionConfigShape> = Config.all({
  headroomBytes: setting(
    "integer",
    "NATIVEGEN_ADMISSION_HEADROOM_BYTES",
    defaults.headroomBytes,
    "device memory never budgeted, in bytes"
  ),
  capBytes: Config.option(Config.integer("NATIVEGEN_ADMISSION_CAP_BYTES")).pipe(
    Config.withDescription("explicit device budget in bytes, instead of free memory minus headroom")
  ),
  workspaceReservationBytes: setting(
    "integer",
    "NATIVEGEN_ADMISSION_WORKSPACE_RESERVATION_BYTES",
    defaults.workspaceReservationBytes,
    "bytes context admission leaves free for request workspace"
  ),
  generationCap: setting(
    "integer",
    "NATIVEGEN_ADMISSION_GENERATION_CONTEXT_CAP",
    defaults.contextCap.generation,
    "context cap of the generation role, in tokens"
  ),
  decisionCap: setting(
    "integer",
    "NATIVEGEN_ADMISSION_DECISION_CONTEXT_CAP",
    defaults.contextCap.decision,
    "context cap of the decision role, in tokens"
  ),
  marginRatio: setting(
    "number",
    "NATIVEGEN_ADMISSION_PLAN_MARGIN_RATIO",
    defaults.planMargin.ratio,
    "fraction added to the engine's memory plan"
  ),
  marginBytes: setting(
    "integer",
    "NATIVEGEN_ADMISSION_PLAN_MARGIN_BYTES",
    defaults.planMargin.bytesPerModel,
    "bytes added per resident model to the engine's memory plan"
  )
}).pipe(
  Config.map((c): AdmissionConfigShape => ({
    headroomBytes: c.headroomBytes,
    capBytes: Option.getOrUndefined(c.capBytes),
    workspaceReservationBytes: c.workspaceReservationBytes,
    contextCap: { generation: c.generationCap, decision: c.decisionCap },
    planMargin: { ratio: c.marginRatio, bytesPerModel: c.marginBytes }
  }))
)

export class AdmissionConfig extends Context.Tag("nativegen/AdmissionConfig")<AdmissionConfig, AdmissionConfigShape>() {
  static readonly defaults: AdmissionConfigShape = defaults

  /** Reads NATIVEGEN_ADMISSION_* from the current ConfigProvider (the environment by default). */
  static readonly config: Config.Config<AdmissionConfigShape> = config

  private static readonly layers = configLayers(AdmissionConfig, { defaults: () => defaults, config, env: fromEnv() })

  static readonly layer = AdmissionConfig.layers.layer
  static readonly layerDefaults = AdmissionConfig.layers.layerDefaults
  /** The configuration from the process environment, whatever ConfigProvider is current. */
  static readonly configFromEnv = AdmissionConfig.layers.configFromEnv
  /** From the current ConfigProvider. */
  static readonly layerConfig = AdmissionConfig.layers.layerConfig()
  /** From the process environment, with `overrides` on top. */
  static readonly layerFromEnv = AdmissionConfig.layers.layerFromEnv
}

const isBytes = (n: number) => Number.isSafeInteger(n) && n >= 0

/** Dies naming every invalid setting: a configuration error is the embedder's, not a runtime failure. */
export const validate = (config: AdmissionConfigShape): Effect.Effect<void> => {
  const problems: Array<string> = []
  if (!isBytes(config.headroomBytes)) problems.push(`headroomBytes ${config.headroomBytes}`)
  if (config.capBytes !== undefined && !isBytes(config.capBytes)) problems.push(`capBytes ${config.capBytes}`)
  if (!isBytes(config.workspaceReservationBytes)) {
    problems.push(`workspaceReservationBytes ${config.workspaceReservationBytes}`)
  }
  for (const role of ["generation", "decision"] as const) {
    const cap = config.contextCap[role]
    if (!Number.isSafeInteger(cap) || cap <= 0) problems.push(`contextCap.${role} ${cap}`)
  }
  if (!(config.planMargin.ratio >= 0 && Number.isFinite(config.planMargin.ratio))) {
    problems.push(`planMargin.ratio ${config.planMargin.ratio}`)
  }
  if (!isBytes(config.planMargin.bytesPerModel)) problems.push(`planMargin.bytesPerModel ${config.planMargin.bytesPerModel}`)
  return problems.length === 0
    ? Effect.void
    : Effect.dieMessage(`invalid admission configuration: ${problems.join(", ")}`)
}
