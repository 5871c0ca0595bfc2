/**
 * Memory plans of a model without loading it: its file's insights (GgufInsights over the GGUF
 * metadata) and llama.cpp's own estimates of the weights and of a context at each candidate size,
 * with what a loaded model holds beyond them and, on the CPU backend, what it never touches
 * (ResidentMemory.ts).
 *
 * A model file's insights are read once per engine and kept from its first plan until its load
 * takes them: reading them parses the whole vocabulary into JavaScript, and their estimators load a
 * vocabulary-only model natively (Qwen3: ~90 MiB together), which stayed resident until a garbage
 * collection, once for each Plan and Load. The load releases the estimators' model at once.
 */
import * as Effect from "effect/Effect"
import { GgufInsights, type Llama, readGgufFileInfo } from "node-llama-cpp"
import * as Fs from "node:fs/promises"
import { ModelLoadFailed } from "../../domain/EngineError.js"
import type { InvalidEngineRequest } from "../../domain/EngineError.js"
import { ContextPlan, MemoryEstimate, ModelPlan } from "../Protocol.js"
import { checkPositiveInt, reasonOf } from "./Checks.js"
import type { Native } from "./Llama.js"
import { type ModelShape, untouchedLogitsBytes, vocabularyBytes } from "./ResidentMemory.js"

/** Model files whose insights an engine keeps between plan and load (two roles, one more for a swap). */
export const KEPT_MODEL_FILES = 4

/** A model file's insights as kept for an engine. */
interface ModelFile {
  /** The file they were read from: device, inode, size and modification time. */
  readonly identity: string
  readonly insights: Promise<GgufInsights>
  /** Plans using the estimators now. */
  users: number
  /** No longer kept (taken by a load, or evicted): the estimators are released after the last user. */
  retired: boolean
}

/** Per llama (one per engine), the kept model files by path, least recently used first. */
const filesByLlama = new WeakMap<Llama, Map<string, ModelFile>>()

const identityOf = async (modelPath: string) => {
  const stat = await Fs.stat(modelPath)
  return `${stat.dev}:${stat.ino}:${stat.size}:${stat.mtimeMs}`
}

/**
 * Releases the estimators' vocabulary-only model now rather than at a garbage collection. The
 * session is node-llama-cpp's internal (3.21.1); where it is absent, collection still frees it.
 */
const releaseEstimators = (insights: GgufInsights): Promise<void> => {
  const session: unknown = Reflect.get(insights, "_simulationSession")
  return typeof session === "object" && session !== null && "dispose" in session && typeof session.dispose === "function"
    ? Promise.resolve(session.dispose()).then(() => undefined, () => undefined)
    : Promise.resolve()
}

const filesOf = (llama: Llama) => {
  const files = filesByLlama.get(llama) ?? new Map<string, ModelFile>()
  filesByLlama.set(llama, files)
  return files
}

const releaseIfUnused = (file: ModelFile) => {
  if (file.retired && file.users === 0) void file.insights.then(releaseEstimators, () => undefined)
}

/** The file is no longer kept: its estimators are released once no plan uses them. */
const retire = (files: Map<string, ModelFile>, modelPath: string, file: ModelFile) => {
  if (files.get(modelPath) === file) files.delete(modelPath)
  file.retired = true
  releaseIfUnused(file)
}

/** The kept file at the path, read now when not kept or when the path names another file; one more user. */
const acquire = (llama: Llama, modelPath: string) =>
  Effect.tryPromise({
    try: async () => {
      const identity = await identityOf(modelPath)
      const files = filesOf(llama)
      const kept = files.get(modelPath)
      let file: ModelFile
      if (kept !== undefined && kept.identity === identity) {
        files.delete(modelPath)
        file = kept
      } else {
        if (kept !== undefined) retire(files, modelPath, kept)
        const insights = readGgufFileInfo(modelPath).then((info) => GgufInsights.from(info, llama))
        file = { identity, insights, users: 0, retired: false }
        insights.catch(() => {
          if (files.get(modelPath) === file) files.delete(modelPath)
        })
      }
      files.set(modelPath, file)
      file.users++
      for (const [path, older] of files) if (files.size > KEPT_MODEL_FILES) retire(files, path, older)
      return file
    },
    catch: (cause) => new ModelLoadFailed({ modelPath, reason: reasonOf(cause) })
  })

/** Runs `use` with a model file's insights (metadata and the estimators bound to this llama). */
const withInsights = <A, E>(
  { llama }: Native,
  modelPath: string,
  use: (insights: GgufInsights, release: () => void) => Effect.Effect<A, E>
): Effect.Effect<A, E | ModelLoadFailed> =>
  Effect.acquireUseRelease(
    acquire(llama, modelPath),
    (file) =>
      Effect.tryPromise({
        try: () => file.insights,
        catch: (cause) => new ModelLoadFailed({ modelPath, reason: reasonOf(cause) })
      }).pipe(Effect.flatMap((insights) => use(insights, () => retire(filesOf(llama), modelPath, file)))),
    (file) =>
      Effect.sync(() => {
        file.users--
        releaseIfUnused(file)
      })
  )

/**
 * A model file's insights for its load: the plans' read when kept, after which they are no longer
 * kept and their estimators are released (the load needs only the metadata).
 */
export const takeInsights = (native: Native, modelPath: string): Effect.Effect<GgufInsights, ModelLoadFailed> =>
  withInsights(native, modelPath, (insights, release) => Effect.sync(() => (release(), insights)))

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
    return yield* withInsights(native, modelPath, (insights) => estimatePlan(native, modelPath, insights, contextSizes, sequences))
  })

const estimatePlan = (
  native: Native,
  modelPath: string,
  insights: GgufInsights,
  contextSizes: ReadonlyArray<number>,
  sequences: number
): Effect.Effect<ModelPlan, ModelLoadFailed> =>
  Effect.gen(function*() {
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
