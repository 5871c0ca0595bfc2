/** Shared test wiring for real engine children on the generated models. */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import * as Layer from "effect/Layer"
import { ensureModel } from "../../fixtures/models.js"
import * as NativeWorker from "../../src/services/NativeWorker.js"
import * as Runtime from "../../src/layers/Runtime.js"
import type { RuntimeOptions } from "../../src/layers/Runtime.js"

/**
 * The engine children of the tests: the CPU, or NATIVEGEN_TEST_ENGINE_BACKEND (`cuda`, `vulkan`)
 * to run the engine suites on a GPU (bench/gpu/ on the device machine).
 */
export const testChild = {
  backend: process.env.NATIVEGEN_TEST_ENGINE_BACKEND === "cuda" || process.env.NATIVEGEN_TEST_ENGINE_BACKEND === "vulkan"
    ? process.env.NATIVEGEN_TEST_ENGINE_BACKEND
    : "cpu",
  threads: 1,
  batchSize: 512
} as const

/**
 * The host's whole environment, for diagnostics on the device (NATIVEGEN_TEST_CHILD_INHERIT_ALL=1):
 * a tool that works through the environment (LD_PRELOAD, compute-sanitizer's injection) reaches
 * the engine children, which otherwise inherit only the names ChildEnvironment lists.
 */
const wholeHostEnvironment = (): Record<string, string> =>
  Object.fromEntries(Object.entries(process.env).filter((entry): entry is [string, string] => entry[1] !== undefined))

/**
 * The prefill chunk of the tests' workers: 128 tokens, or NATIVEGEN_TEST_PREFILL_CHUNK (device
 * diagnostics: the suites with a GPU's default chunk; cases that count chunks then fail).
 */
export const testPrefillChunk = Number(process.env.NATIVEGEN_TEST_PREFILL_CHUNK ?? 128)

/**
 * This test run's marker (set by globalSetup), passed to engine children explicitly: they do not
 * inherit the host's environment, and globalSetup finds leftover children by it.
 */
export const testRunEnv: Record<string, string> = {
  ...(process.env.NATIVEGEN_TEST_CHILD_INHERIT_ALL === "1" ? wholeHostEnvironment() : {}),
  ...(process.env.NATIVEGEN_TEST_RUN === undefined ? {} : { NATIVEGEN_TEST_RUN: process.env.NATIVEGEN_TEST_RUN })
}

/**
 * A worker with tiny as the generation model and decision as the decision model, small contexts.
 * Its hooks are no-ops unless given (e.g. `NativeWorker.ChildResources.layer(...)`).
 */
export const workerLayer = (
  overrides: Partial<NativeWorker.NativeWorkerConfigShape> = {},
  hooks: Layer.Layer<NativeWorker.WorkerAdmission | NativeWorker.ChildResources> = NativeWorker.hooksNoop
) =>
  // Fresh: it.layer shares a memo map per file, and each suite wants its own child.
  Layer.fresh(NativeWorker.layer).pipe(
    Layer.provide(hooks),
    Layer.provide(
      NativeWorker.NativeWorkerConfig.layer({
        child: testChild,
        models: {
          generation: { modelPath: ensureModel("tiny"), contextSize: 4096, sequences: 2 },
          decision: { modelPath: ensureModel("decision"), contextSize: 1024 }
        },
        prefillChunk: testPrefillChunk,
        stopTimeout: Duration.seconds(3),
        ...overrides,
        childEnv: { ...testRunEnv, ...overrides.childEnv }
      })
    )
  )

/** The whole runtime (worker, admission, scheduler, provider) over tiny and decision (or the given models), by path. */
export const runtimeLayer = (
  options: Partial<RuntimeOptions> = {},
  models: { readonly generation?: string; readonly decision?: string } = {}
) =>
  Layer.fresh(
    Runtime.layerWithModels({
      generation: models.generation ?? ensureModel("tiny"),
      decision: models.decision ?? ensureModel("decision")
    }, {
      ...options,
      admission: { contextCap: { generation: 4096, decision: 1024 }, workspaceReservationBytes: 64 * 1024 * 1024, ...options.admission },
      worker: {
        child: testChild,
        prefillChunk: testPrefillChunk,
        stopTimeout: Duration.seconds(3),
        ...options.worker,
        childEnv: { ...testRunEnv, ...options.worker?.childEnv }
      }
    })
  )

/** The first worker readiness (checked at each state change) that satisfies `predicate`. */
export const awaitReadiness = (predicate: (r: NativeWorker.WorkerReadiness) => boolean) =>
  Effect.flatMap(NativeWorker.NativeWorker, (worker) =>
    worker.states.pipe(
      Stream.mapEffect(() => worker.readiness),
      Stream.filter(predicate),
      Stream.runHead,
      Effect.map(Option.getOrThrow)
    ))
