/**
 * What planning leaves in an engine child: admission plans a role twice (the header, then the
 * candidate sizes) and the load reads the file's insights again, and each read used to parse
 * Qwen3's whole vocabulary into JavaScript and load a vocabulary-only model for the estimators,
 * resident until a garbage collection (+80-90 MiB per read). The child now reads a file's insights
 * once: planning the same model again grows the child by no more than allocator noise. The
 * figures (the child's resident set after hello, after the first planning, after two more) are
 * printed.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import { ensureModel } from "../../fixtures/models.js"
import { spawn } from "../../src/native/ChildProcess.js"
import { admissionOver, childPlanner, hasProc, mib, residentBytes } from "../support/admission-child.js"
import { testChild, testRunEnv } from "../support/engine.js"

/** Resident growth that is allocator and heap noise, not a copy of a 151k-token vocabulary. */
const NOISE_BYTES = 16 * 1024 * 1024

describe("Planning's resident memory in the engine child", () => {
  it.scoped.skipIf(!hasProc)("planning a model again does not grow the child by another vocabulary copy", () =>
    Effect.gen(function*() {
      const child = yield* spawn({ settings: testChild, env: testRunEnv, stopTimeout: Duration.seconds(3) })
      const hello = yield* child.client.Hello()
      const admission = yield* admissionOver(hello)
      const planOnce = admission.admitContexts(
        { generation: { modelPath: ensureModel("qwen-chat"), cap: 1024 } },
        childPlanner(child.client)
      )
      const baseline = yield* residentBytes(child.pid)
      yield* planOnce
      const afterFirst = yield* residentBytes(child.pid)
      yield* planOnce
      yield* planOnce
      const afterRepeats = yield* residentBytes(child.pid)
      yield* Effect.sync(() =>
        console.info(
          `child RSS: ${mib(baseline)} MiB after hello, +${mib(afterFirst - baseline)} MiB after planning qwen-chat, +${
            mib(afterRepeats - afterFirst)
          } MiB more after planning it twice again`
        )
      )
      assert.isAtMost(afterRepeats - afterFirst, NOISE_BYTES, "planning the same model again")
    }), { timeout: 120_000 })
})
