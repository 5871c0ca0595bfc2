/**
 * Memory plans of a model without loading it: its file's insights (GgufInsights over the GGUF
 * metadata) and llama.cpp's own estimates of the weights and of a context at each candidate size.
 */
import * as Effect from "effect/Effect"
import { GgufInsights, readGgufFileInfo } from "node-llama-cpp"
import { ModelLoadFailed } from "../../domain/EngineError.js"
import type { InvalidEngineRequest } from "../../domain/EngineError.js"
import { ContextPlan, MemoryEstimate, ModelPlan } from "../Protocol.js"
import { checkPositiveInt, reasonOf } from "./Checks.js"
import type { Native } from "./Llama.js"

/** A model file's insights: metadata and the estimators bound to this llama. */
export const readInsights = ({ llama }: Native, modelPath: string) =>
  Effect.tryPromise({
    try: async () => GgufInsights.from(await readGgufFileInfo(modelPath), llama),
    catch: (cause) => new ModelLoadFailed({ modelPath, reason: reasonOf(cause) })
  })

// Whole bytes, rounded up: for an architecture llama.cpp does not know the estimator's figures
// are fractional, and the plan must still reach the host (whose load then fails with the reason).
const estimateOf = (e: { readonly cpuRam: number; readonly gpuVram: number }) =>
  new MemoryEstimate({ cpuBytes: Math.ceil(e.cpuRam), gpuBytes: Math.ceil(e.gpuVram) })

/** The model's weights and a context of each size with `sequences` sequences, as estimated. */
export const plan = (
  native: Native,
  modelPath: string,
  contextSizes: ReadonlyArray<number>,
  sequences: number
): Effect.Effect<ModelPlan, InvalidEngineRequest | ModelLoadFailed> =>
  Effect.gen(function*() {
    yield* checkPositiveInt("sequences", sequences)
    for (const size of contextSizes) yield* checkPositiveInt("contextSize", size)
    const insights = yield* readInsights(native, modelPath)
    const estimate = <A>(run: () => Promise<A>) =>
      Effect.tryPromise({ try: run, catch: (cause) => new ModelLoadFailed({ modelPath, reason: reasonOf(cause) }) })
    const layers = Math.min(native.gpuLayers, insights.totalLayers)
    const weights = yield* estimate(() => insights.estimateModelResourceRequirementsV2({ gpuLayers: layers }))
    const contexts: Array<ContextPlan> = []
    for (const contextSize of contextSizes) {
      const c = yield* estimate(() =>
        insights.estimateContextResourceRequirementsV2({
          contextSize,
          sequences,
          batchSize: Math.min(native.options.batchSize, contextSize),
          modelGpuLayers: layers
        })
      )
      contexts.push(new ContextPlan({ contextSize, context: estimateOf(c) }))
    }
    return new ModelPlan({
      modelPath,
      trainedContextSize: insights.trainContextSize ?? 0,
      weights: estimateOf(weights),
      contexts
    })
  })
