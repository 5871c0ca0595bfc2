/**
 * Context admission as a pure function. Given each resident role's native allocation plan over
 * candidate context sizes, the bytes available on the device, the workspace reservation and the
 * plan margin, it picks each role's context: the largest candidate (256-token blocks, plus the
 * exact cap or trained size) such that weights + KV + compute of every role, with margin, plus
 * the reservation fit together. Roles are chosen in priority order (decision, then generation):
 * the decision role gets the largest context that still leaves every later role its cheapest
 * candidate, then the generation role the largest that fits what is left. This is the
 * lexicographic maximum over (decision, generation); it scans every candidate, because plans are
 * not monotone in the context size (tiny's compute buffers shrink from 1024 to 1280 tokens).
 */
import type { ContextPlan, MemoryEstimate, ModelPlan, Role } from "../../native/Protocol.js"

/** Context sizes are admitted in blocks of this many tokens. */
export const BLOCK_TOKENS = 256

/** Roles in the order they are admitted: decision first (it preempts; its requests are bounded). */
export const ROLE_ORDER: ReadonlyArray<Role> = ["decision", "generation"]

/** How much is added to the engine's plan before it is charged (engine-notes.md: V2 runs low). */
export interface PlanMargin {
  /** Fraction added to every planned amount (weights and context). */
  readonly ratio: number
  /** Bytes added once per resident model (the engine child's own growth with its first model, which no plan sees). */
  readonly bytesPerModel: number
}

/** Which memory of an estimate counts against the device: VRAM for a GPU, RAM for the CPU backend. */
export type DeviceKind = "cpu" | "gpu"

export interface RolePlanInput {
  readonly role: Role
  readonly plan: ModelPlan
  /** Configured cap in tokens for this role's context. */
  readonly cap: number
}

export interface PlannerInput {
  readonly roles: ReadonlyArray<RolePlanInput>
  readonly deviceKind: DeviceKind
  /** Bytes the resident roles may take with the reservation: the budget minus what is already charged. */
  readonly availableBytes: number
  /** Bytes kept free for per-request workspace after both roles are resident. */
  readonly reservationBytes: number
  readonly margin: PlanMargin
}

/** Why a role's admitted context is what it is. */
export type LimitedBy = "cap" | "trainedContext" | "budget"

export interface AdmittedRole {
  readonly role: Role
  readonly modelPath: string
  /** The admitted context in tokens. */
  readonly contextSize: number
  readonly cap: number
  /** The model's trained context; 0 when the model does not say. */
  readonly trainedContextSize: number
  /** "cap": the configured cap was kept; "trainedContext": the model's trained size is below the cap; "budget": memory. */
  readonly limitedBy: LimitedBy
  /** Bytes to charge for the resident weights (plan with margin). */
  readonly weightsBytes: number
  /** Bytes to charge for the KV cache and compute buffers of the admitted context (plan with margin). */
  readonly contextBytes: number
}

export interface Admitted {
  readonly roles: ReadonlyArray<AdmittedRole>
  /** Sum of every role's weights and context charge. */
  readonly residentBytes: number
  readonly availableBytes: number
  readonly reservationBytes: number
}

/** What one role needed at its cheapest candidate, and what was left for it. */
export interface RoleShortfall {
  readonly role: Role
  readonly modelPath: string
  /** The cheapest candidate context (tokens), or 0 when the role has no candidate at all. */
  readonly contextSize: number
  /** Weights plus context charge at that candidate, with margin. */
  readonly neededBytes: number
  /** Bytes left for this role: available minus reservation minus every other role's cheapest need. */
  readonly availableBytes: number
}

export interface Shortfall {
  readonly roles: ReadonlyArray<RoleShortfall>
  readonly availableBytes: number
  readonly reservationBytes: number
}

export type PlannerResult =
  | { readonly _tag: "Admitted"; readonly admitted: Admitted }
  | { readonly _tag: "Shortfall"; readonly shortfall: Shortfall }

/** The largest context a role may have: its cap, or its trained size when that is known and smaller. */
export const contextLimit = (cap: number, trainedContextSize: number): number =>
  trainedContextSize > 0 ? Math.min(cap, trainedContextSize) : cap

/**
 * The context sizes worth planning for: every 256-token block up to the limit, and the limit
 * itself (the exact cap, or the exact trained size), ascending and without duplicates.
 */
export const candidateSizes = (cap: number, trainedContextSize: number): ReadonlyArray<number> => {
  const limit = contextLimit(cap, trainedContextSize)
  if (!Number.isInteger(limit) || limit <= 0) return []
  const sizes: Array<number> = []
  for (let s = BLOCK_TOKENS; s <= limit; s += BLOCK_TOKENS) sizes.push(s)
  if (limit % BLOCK_TOKENS !== 0) sizes.push(limit)
  return sizes
}

/** Bytes of an estimate that live on the device. */
export const onDevice = (estimate: MemoryEstimate, kind: DeviceKind): number =>
  kind === "gpu" ? estimate.gpuBytes : estimate.cpuBytes

/** A planned amount with the margin's ratio applied (rounded up). */
export const withRatio = (bytes: number, margin: PlanMargin): number => Math.ceil(bytes * (1 + margin.ratio))

/**
 * The weights charge of a plan: its weights with ratio, what the loaded model holds beyond them
 * (already a rounded-up charge, so without ratio), plus the per-model bytes.
 */
export const weightsCharge = (plan: ModelPlan, kind: DeviceKind, margin: PlanMargin): number =>
  withRatio(onDevice(plan.weights, kind), margin) + onDevice(plan.overhead, kind) + margin.bytesPerModel

/** The context (KV + compute) charge of one planned context size: what its use touches, with ratio. */
export const contextCharge = (context: ContextPlan, kind: DeviceKind, margin: PlanMargin): number =>
  withRatio(Math.max(0, onDevice(context.context, kind) - onDevice(context.untouched, kind)), margin)

interface Option_ {
  readonly contextSize: number
  readonly contextBytes: number
  readonly needBytes: number
}

const optionsOf = (input: RolePlanInput, kind: DeviceKind, margin: PlanMargin, weights: number) => {
  const wanted = new Set(candidateSizes(input.cap, input.plan.trainedContextSize))
  const options: Array<Option_> = []
  const seen = new Set<number>()
  for (const c of input.plan.contexts) {
    if (!wanted.has(c.contextSize) || seen.has(c.contextSize)) continue
    seen.add(c.contextSize)
    const contextBytes = contextCharge(c, kind, margin)
    options.push({ contextSize: c.contextSize, contextBytes, needBytes: weights + contextBytes })
  }
  return options.sort((a, b) => a.contextSize - b.contextSize)
}

const cheapest = (options: ReadonlyArray<Option_>): Option_ | undefined =>
  options.reduce<Option_ | undefined>((best, o) => (best === undefined || o.needBytes < best.needBytes ? o : best), undefined)

/** Chooses every role's context, or says for each role what it needed and what was left for it. */
export const planContexts = (input: PlannerInput): PlannerResult => {
  const { deviceKind: kind, margin } = input
  const ordered = [...input.roles].sort((a, b) => ROLE_ORDER.indexOf(a.role) - ROLE_ORDER.indexOf(b.role))
  const roles = ordered.map((r) => {
    const weights = weightsCharge(r.plan, kind, margin)
    const options = optionsOf(r, kind, margin, weights)
    return { input: r, weights, options, cheapest: cheapest(options) }
  })
  const room = input.availableBytes - input.reservationBytes
  const minNeed = roles.map((r) => r.cheapest?.needBytes ?? Number.POSITIVE_INFINITY)
  const totalMin = minNeed.reduce((a, b) => a + b, 0)

  if (!(totalMin <= room)) {
    return {
      _tag: "Shortfall",
      shortfall: {
        availableBytes: input.availableBytes,
        reservationBytes: input.reservationBytes,
        roles: roles.map((r, i) => ({
          role: r.input.role,
          modelPath: r.input.plan.modelPath,
          contextSize: r.cheapest?.contextSize ?? 0,
          neededBytes: r.cheapest?.needBytes ?? r.weights,
          availableBytes: Math.max(
            0,
            room - minNeed.reduce((sum, need, j) => (j === i || !Number.isFinite(need) ? sum : sum + need), 0)
          )
        }))
      }
    }
  }

  let used = 0
  const admitted: Array<AdmittedRole> = []
  roles.forEach((r, i) => {
    const later = minNeed.slice(i + 1).reduce((a, b) => a + b, 0)
    let chosen: Option_ | undefined
    for (const o of r.options) if (used + o.needBytes + later <= room) chosen = o
    // totalMin fits, so the cheapest option of this role fits with the earlier choices and later minima.
    const pick = chosen ?? r.cheapest!
    used += pick.needBytes
    const limit = contextLimit(r.input.cap, r.input.plan.trainedContextSize)
    admitted.push({
      role: r.input.role,
      modelPath: r.input.plan.modelPath,
      contextSize: pick.contextSize,
      cap: r.input.cap,
      trainedContextSize: r.input.plan.trainedContextSize,
      limitedBy: pick.contextSize < limit ? "budget" : limit < r.input.cap ? "trainedContext" : "cap",
      weightsBytes: r.weights,
      contextBytes: pick.contextBytes
    })
  })
  return {
    _tag: "Admitted",
    admitted: {
      roles: admitted,
      residentBytes: used,
      availableBytes: input.availableBytes,
      reservationBytes: input.reservationBytes
    }
  }
}
