/**
 * Memory plans of a model without loading it: its file's insights (GgufInsights over the GGUF
 * metadata) and llama.cpp's own estimates of the weights and of a context at each candidate size,
 * with what a loaded model holds beyond them and, on the CPU backend, what it never touches
 * (ResidentMemory.ts).
 */
import * as Effect from "effect/Effect"
import { GgufInsights, readGgufFileInfo } from "node-llama-cpp"
import { ModelLoadFailed } from "../../domain/EngineError.js"
import type { InvalidEngineRequest } from "../../domain/EngineError.js"
import { ContextPlan, MemoryEstimate, ModelPlan } from "../Protocol.js"
import { checkPositiveInt, reasonOf } from "./Checks.js"
import type { Native } from "./Llama.js"
import { type ModelShape, untouchedLogitsBytes, vocabularyBytes } from "./ResidentMemory.js"

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

const vocabularyEntries = (insights: GgufInsights): number =>
  (insights.ggufFileInfo.metadata.tokenizer?.ggml?.tokens?.length ?? 0) +
  (insights.ggufFileInfo.metadata.tokenizer?.ggml?.merges?.length ?? 0)

/** The shape resident memory depends on; undefined when the metadata does not say (nothing is then discounted). */
const shapeOf = (insights: GgufInsights): ModelShape | undefined => {
  const info = insights.ggufFileInfo
  const arch = info.architectureMetadata
  const heads = arch?.attention?.head_count
  const kvHeadsOf = arch?.attention?.head_count_kv ?? heads
  const kvHeads = Array.isArray(kvHeadsOf) ? Math.max(...kvHeadsOf) : kvHeadsOf
  const embedding = arch?.embedding_length
  const feedForward = arch?.feed_forward_length
  if (heads === undefined || kvHeads === undefined || embedding === undefined || feedForward === undefined) return undefined
  if (typeof feedForward !== "number" || heads <= 0) return undefined
  const headDim = Math.max(arch?.attention?.key_length ?? embedding / heads, arch?.attention?.value_length ?? 0)
  return { vocabularySize: info.metadata.tokenizer?.ggml?.tokens?.length ?? 0, embedding, feedForward, heads, kvHeads, headDim }
}

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
    const shape = shapeOf(insights)
    const onCpu = native.gpuLayers === 0
    const weights = yield* estimate(() => insights.estimateModelResourceRequirementsV2({ gpuLayers: layers }))
    const contexts: Array<ContextPlan> = []
    for (const contextSize of contextSizes) {
      const batchSize = Math.min(native.options.batchSize, contextSize)
      const c = yield* estimate(() =>
        insights.estimateContextResourceRequirementsV2({ contextSize, sequences, batchSize, modelGpuLayers: layers })
      )
      // On a GPU the allocation is committed whether touched or not: nothing is discounted there.
      const untouched = onCpu && shape !== undefined
        ? Math.min(Math.ceil(c.cpuRam), untouchedLogitsBytes(shape, batchSize, contextSize, sequences))
        : 0
      contexts.push(
        new ContextPlan({
          contextSize,
          context: estimateOf(c),
          untouched: new MemoryEstimate({ cpuBytes: untouched, gpuBytes: 0 })
        })
      )
    }
    return new ModelPlan({
      modelPath,
      trainedContextSize: insights.trainContextSize ?? 0,
      weights: estimateOf(weights),
      // The vocabulary's structures live in RAM whichever backend runs the layers.
      overhead: new MemoryEstimate({ cpuBytes: vocabularyBytes(vocabularyEntries(insights)), gpuBytes: 0 }),
      contexts
    })
  })
