/**
 * The plan margin against reality: in one engine child, context admission picks the contexts,
 * then each role is loaded at its admitted context and used once (a prefill, a score) so its
 * buffers are touched, and the child's resident set growth (from /proc) is compared with what
 * admission charges for that role (the engine's V2 plan plus the margin). The growth must stay
 * within the charge, and be at least half the bare plan (so the probe sees the allocation).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Stream from "effect/Stream"
import { ensureModel } from "../../fixtures/models.js"
import { type EngineChild, spawn } from "../../src/native/ChildProcess.js"
import type { Role } from "../../src/native/Protocol.js"
import { admissionOver, childPlanner, hasProc, mib, residentBytes, useRoleOnce } from "../support/admission-child.js"
import { testChild, testRunEnv } from "../support/engine.js"

class Child extends Context.Tag("test/admission/Child")<Child, EngineChild>() {}

const childLayer = Layer.scoped(Child, spawn({ settings: testChild, env: testRunEnv, stopTimeout: Duration.seconds(3) }))

describe("Admission plan margin against measured memory", () => {
  it.layer(childLayer, { timeout: 120_000 })((it) => {
    it.effect.skipIf(!hasProc)("each role's resident growth after load and first use stays within its charge", () =>
      Effect.gen(function*() {
        const child = yield* Child
        const { client } = child
        const hello = yield* client.Hello()
        const plan = childPlanner(client)
        const admission = yield* admissionOver(hello)
        const models: Record<Role, string> = { generation: ensureModel("small"), decision: ensureModel("decision") }
        const admitted = yield* admission.admitContexts({
          generation: { modelPath: models.generation, cap: 4096 },
          decision: { modelPath: models.decision, cap: 1024 }
        }, plan)
        const figures: Array<string> = []
        for (const role of ["generation", "decision"] as const) {
          const r = admitted.roles.find((a) => a.role === role)!
          const bare = yield* plan(r.modelPath, [r.contextSize], 1)
          const planned = bare.weights.cpuBytes + bare.contexts[0]!.context.cpuBytes
          const before = yield* residentBytes(child.pid)
          const loaded = yield* client.Load({ role, modelPath: r.modelPath, contextSize: r.contextSize, sequences: 1 }).pipe(
            Stream.runCollect,
            Effect.map((events) => [...events].flatMap((e) => (e._tag === "Loaded" ? [e.model] : []))[0]!)
          )
          assert.strictEqual(loaded.contextSize, r.contextSize)
          yield* useRoleOnce(client, role, r.contextSize, "the quick brown fox ".repeat(150))
          const growth = (yield* residentBytes(child.pid)) - before
          const charged = r.weightsBytes + r.contextBytes
          figures.push(
            `${role} ${r.contextSize} tokens: plan ${mib(planned, 2)} MiB, child reports ${
              mib(loaded.measured.modelBytes + loaded.measured.contextBytes, 2)
            } MiB, RSS growth ${mib(growth, 2)} MiB (${(growth / planned).toFixed(2)}x plan), charged ${mib(charged, 2)} MiB`
          )
          assert.isAtMost(growth, charged, `${role}: growth within the charge`)
          // RSS moves by a few MiB on its own (GC, allocator trimming): only a plan well above that
          // noise must show up in the measurement.
          if (planned >= 16 * 1024 * 1024) assert.isAtLeast(growth, planned / 2, `${role}: the probe sees the allocation`)
          // Reconciling with the measurement charges nothing more: the margin covered it.
          const added = yield* Effect.scoped(
            Effect.gen(function*() {
              const { kv, weights } = yield* admission.chargeResident(role)
              return yield* admission.reconcile(kv, growth - weights.bytes)
            })
          )
          assert.strictEqual(added, 0)
        }
        // The figures for docs/decisions.md (it.effect mutes the logger, so print them).
        yield* Effect.sync(() => console.info(`plan vs measured: ${figures.join("; ")}`))
      }))
  })
})
