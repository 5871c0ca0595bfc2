/**
 * Context admission as a pure function: for random plans (not monotone in the context size),
 * budgets, reservations, margins and caps, the choice equals an exhaustive search over every
 * pair of admissible sizes, and is always a 256-token multiple or the exact cap (or trained size).
 */
import { assert, describe, it } from "@effect/vitest"
import * as fc from "effect/FastCheck"
import { ContextPlan, MemoryEstimate, ModelPlan, type Role } from "../../src/native/Protocol.js"
import {
  candidateSizes,
  type DeviceKind,
  type PlanMargin,
  planContexts,
  type RolePlanInput
} from "../../src/services/admission/ContextPlanner.js"

interface RoleSpec {
  readonly role: Role
  readonly cap: number
  readonly trained: number
  readonly weights: readonly [number, number]
  /** Context bytes per candidate index, [cpu, gpu], cycled. */
  readonly contexts: ReadonlyArray<readonly [number, number]>
  /** Extra planned sizes the planner must ignore (not candidates). */
  readonly extra: ReadonlyArray<number>
}

const pair = fc.tuple(fc.nat({ max: 1000 }), fc.nat({ max: 1000 }))

const roleSpec = (role: Role): fc.Arbitrary<RoleSpec> =>
  fc.record({
    role: fc.constant(role),
    cap: fc.oneof(fc.integer({ min: 1, max: 3500 }), fc.constantFrom(256, 512, 1024, 2048)),
    trained: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 4000 }), fc.constantFrom(1024, 2048, 8192)),
    weights: pair,
    contexts: fc.array(pair, { minLength: 1, maxLength: 16 }),
    extra: fc.array(fc.integer({ min: 1, max: 5000 }), { maxLength: 3 })
  })

const planOf = (spec: RoleSpec): ModelPlan => {
  const sizes = [...candidateSizes(spec.cap, spec.trained), ...spec.extra]
  return new ModelPlan({
    modelPath: `/models/${spec.role}.gguf`,
    trainedContextSize: spec.trained,
    weights: new MemoryEstimate({ cpuBytes: spec.weights[0], gpuBytes: spec.weights[1] }),
    contexts: sizes.map((contextSize, i) => {
      const [cpuBytes, gpuBytes] = spec.contexts[i % spec.contexts.length]!
      return new ContextPlan({ contextSize, context: new MemoryEstimate({ cpuBytes, gpuBytes }) })
    })
  })
}

const scenario = fc.record({
  roles: fc.oneof(
    { weight: 4, arbitrary: fc.tuple(roleSpec("decision"), roleSpec("generation")).map((r): ReadonlyArray<RoleSpec> => r) },
    { weight: 1, arbitrary: roleSpec("generation").map((r): ReadonlyArray<RoleSpec> => [r]) },
    { weight: 1, arbitrary: roleSpec("decision").map((r): ReadonlyArray<RoleSpec> => [r]) }
  ),
  deviceKind: fc.constantFrom<DeviceKind>("cpu", "gpu"),
  availableBytes: fc.nat({ max: 5000 }),
  reservationBytes: fc.nat({ max: 500 }),
  margin: fc.record({ ratio: fc.constantFrom(0, 0.05, 0.1, 0.2), bytesPerModel: fc.nat({ max: 100 }) })
})

/** Is `a` larger than `b`, comparing the decision size first, then the generation size? */
const lexicallyLarger = (a: ReadonlyArray<number>, b: ReadonlyArray<number>) => {
  for (let j = 0; j < a.length; j++) if (a[j] !== b[j]) return a[j]! > b[j]!
  return false
}

/** Everything the planner decides, computed the slow way from the definitions. */
const bruteForce = (
  specs: ReadonlyArray<RoleSpec>,
  kind: DeviceKind,
  available: number,
  reservation: number,
  margin: PlanMargin
) => {
  const k = kind === "cpu" ? 0 : 1
  const charge = (bytes: number) => Math.ceil(bytes * (1 + margin.ratio))
  const order = [...specs].sort((a, b) => (a.role === b.role ? 0 : a.role === "decision" ? -1 : 1))
  const options = order.map((spec) => {
    const limit = spec.trained > 0 ? Math.min(spec.cap, spec.trained) : spec.cap
    const plan = planOf(spec)
    const weights = charge(spec.weights[k]) + margin.bytesPerModel
    const list: Array<{ size: number; need: number; context: number }> = []
    for (let size = 1; size <= limit; size++) {
      if (size % 256 !== 0 && size !== limit) continue
      // The first planned entry of this size, as the child answered it.
      const c = plan.contexts.find((p) => p.contextSize === size)!
      const context = charge(k === 0 ? c.context.cpuBytes : c.context.gpuBytes)
      list.push({ size, need: weights + context, context })
    }
    return { spec, limit, weights, list }
  })
  let best: ReadonlyArray<{ size: number; need: number; context: number }> | undefined
  const walk = (i: number, chosen: Array<{ size: number; need: number; context: number }>, used: number) => {
    if (i === options.length) {
      if (used + reservation > available) return
      if (best === undefined || lexicallyLarger(chosen.map((c) => c.size), best.map((c) => c.size))) best = [...chosen]
      return
    }
    for (const o of options[i]!.list) walk(i + 1, [...chosen, o], used + o.need)
  }
  walk(0, [], 0)
  return { options, best }
}

describe("ContextPlanner", () => {
  it.prop("agrees with an exhaustive search over every admissible pair", [scenario], ([s]) => {
    const inputs: Array<RolePlanInput> = s.roles.map((r) => ({ role: r.role, plan: planOf(r), cap: r.cap }))
    const result = planContexts({
      roles: inputs,
      deviceKind: s.deviceKind,
      availableBytes: s.availableBytes,
      reservationBytes: s.reservationBytes,
      margin: s.margin
    })
    const { best, options } = bruteForce(s.roles, s.deviceKind, s.availableBytes, s.reservationBytes, s.margin)
    if (best === undefined) {
      assert.strictEqual(result._tag, "Shortfall")
      if (result._tag !== "Shortfall") return
      const minNeeds = options.map((o) => Math.min(...o.list.map((c) => c.need)))
      const room = s.availableBytes - s.reservationBytes
      assert.deepStrictEqual(
        result.shortfall.roles.map((r) => [r.role, r.neededBytes, r.availableBytes]),
        options.map((o, i) => [
          o.spec.role,
          Number.isFinite(minNeeds[i]!) ? minNeeds[i] : o.weights,
          Math.max(0, room - minNeeds.reduce((a, n, j) => (j === i || !Number.isFinite(n) ? a : a + n), 0))
        ])
      )
      return
    }
    assert.strictEqual(result._tag, "Admitted")
    if (result._tag !== "Admitted") return
    const admitted = result.admitted
    assert.deepStrictEqual(admitted.roles.map((r) => [r.role, r.contextSize]), options.map((o, i) => [o.spec.role, best![i]!.size]))
    admitted.roles.forEach((r, i) => {
      const o = options[i]!
      assert.isTrue(r.contextSize % 256 === 0 || r.contextSize === o.limit, "a block multiple, or the exact limit")
      assert.strictEqual(r.weightsBytes, o.weights)
      assert.strictEqual(r.contextBytes, best![i]!.context)
      assert.strictEqual(
        r.limitedBy,
        r.contextSize < o.limit ? "budget" : o.limit < o.spec.cap ? "trainedContext" : "cap"
      )
    })
    assert.strictEqual(admitted.residentBytes, best.reduce((a, c) => a + c.need, 0))
    assert.isAtMost(admitted.residentBytes + s.reservationBytes, s.availableBytes)
  }, { fastCheck: { numRuns: 2000 } })

  const flat = (role: Role, cap: number, trained: number, weights: number, perToken: number): RolePlanInput => ({
    role,
    cap,
    plan: new ModelPlan({
      modelPath: `/models/${role}.gguf`,
      trainedContextSize: trained,
      weights: new MemoryEstimate({ cpuBytes: weights, gpuBytes: 0 }),
      contexts: candidateSizes(cap, trained).map((contextSize) =>
        new ContextPlan({ contextSize, context: new MemoryEstimate({ cpuBytes: contextSize * perToken, gpuBytes: 0 }) })
      )
    })
  })
  const none: PlanMargin = { ratio: 0, bytesPerModel: 0 }

  it("keeps the exact cap when it fits, even off the 256-token grid", () => {
    const result = planContexts({
      roles: [flat("generation", 1000, 8192, 100, 1)],
      deviceKind: "cpu",
      availableBytes: 1100,
      reservationBytes: 0,
      margin: none
    })
    assert.strictEqual(result._tag, "Admitted")
    if (result._tag === "Admitted") {
      assert.deepStrictEqual(result.admitted.roles.map((r) => [r.contextSize, r.limitedBy]), [[1000, "cap"]])
    }
  })

  it("falls to the largest 256-token block that fits, and says the budget is why", () => {
    const result = planContexts({
      roles: [flat("generation", 1000, 8192, 100, 1)],
      deviceKind: "cpu",
      availableBytes: 1099,
      reservationBytes: 0,
      margin: none
    })
    assert.strictEqual(result._tag, "Admitted")
    if (result._tag === "Admitted") {
      assert.deepStrictEqual(result.admitted.roles.map((r) => [r.contextSize, r.limitedBy]), [[768, "budget"]])
    }
  })

  it("stops at the trained context and says so", () => {
    const result = planContexts({
      roles: [flat("generation", 16384, 2048, 100, 1)],
      deviceKind: "cpu",
      availableBytes: 1 << 20,
      reservationBytes: 0,
      margin: none
    })
    assert.strictEqual(result._tag, "Admitted")
    if (result._tag === "Admitted") {
      assert.deepStrictEqual(result.admitted.roles.map((r) => [r.contextSize, r.limitedBy]), [[2048, "trainedContext"]])
    }
  })

  it("admits the decision role first, then gives the generation role what is left", () => {
    const result = planContexts({
      roles: [flat("generation", 4096, 8192, 0, 1), flat("decision", 1024, 8192, 0, 1)],
      deviceKind: "cpu",
      availableBytes: 3000 + 512,
      reservationBytes: 512,
      margin: none
    })
    assert.strictEqual(result._tag, "Admitted")
    if (result._tag === "Admitted") {
      assert.deepStrictEqual(result.admitted.roles.map((r) => [r.role, r.contextSize, r.limitedBy]), [
        ["decision", 1024, "cap"],
        ["generation", 1792, "budget"]
      ])
    }
  })

  it("when nothing fits, says per role what it needed and what was left for it", () => {
    const result = planContexts({
      roles: [flat("generation", 4096, 8192, 1000, 1), flat("decision", 1024, 8192, 500, 1)],
      deviceKind: "cpu",
      availableBytes: 2000,
      reservationBytes: 300,
      margin: { ratio: 0.1, bytesPerModel: 10 }
    })
    assert.strictEqual(result._tag, "Shortfall")
    if (result._tag === "Shortfall") {
      // decision: ceil(500*1.1)+10 + ceil(256*1.1) = 560 + 282; generation: 1110 + 282.
      assert.deepStrictEqual(result.shortfall.roles.map((r) => [r.role, r.contextSize, r.neededBytes, r.availableBytes]), [
        ["decision", 256, 842, 1700 - 1392],
        ["generation", 256, 1392, 1700 - 842]
      ])
    }
  })

  it("plans every 256-token block up to the limit, plus the exact limit", () => {
    assert.deepStrictEqual(candidateSizes(1000, 8192), [256, 512, 768, 1000])
    assert.deepStrictEqual(candidateSizes(1024, 0), [256, 512, 768, 1024])
    assert.deepStrictEqual(candidateSizes(4096, 600), [256, 512, 600])
    assert.deepStrictEqual(candidateSizes(100, 8192), [100])
    assert.deepStrictEqual(candidateSizes(0, 8192), [])
  })
})
