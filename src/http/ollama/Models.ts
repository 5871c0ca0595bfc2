/**
 * The models Ollama's API names: the runtime's resident roles (from readiness), each under
 * Ollama's name `<model>:latest` (a request may name either form, in any case), with what
 * Ollama's listings show, read from the model file: its size and modification time, its digest
 * (the store manifest's, as Ollama's is its manifest's; the file's sha256 for a model loaded by
 * path), and from its GGUF header the details (family, parameter size, quantization), the scalar
 * metadata (`model_info`), the chat template and what the template supports. A file's facts are
 * read once per path, size and modification time, and kept.
 */
import * as Cache from "effect/Cache"
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as NodeFs from "node:fs"
import * as Digest from "../../domain/Digest.js"
import { hashFile } from "../../domain/FileHash.js"
import { fileTypeName } from "../../domain/GgufFileType.js"
import * as GgufHeader from "../../domain/GgufHeader.js"
import type { EngineState, Role } from "../../domain/Inference.js"
import { Provider } from "../../services/Provider.js"
import { HttpConfig } from "../HttpConfig.js"
import type { Refusal } from "../Refusals.js"

/** A resident role's model, as Ollama names it. */
export interface LoadedModel {
  readonly role: Role
  /** `<model>:latest`, or the model's own name when it has a tag. */
  readonly name: string
  readonly modelPath: string
  readonly manifestDigest: string | null
  readonly admittedContext: number | null
}

/** Ollama's `capabilities` values nativegen can offer. */
export type Capability = "completion" | "tools" | "thinking"

/** Ollama's `details` of a model. */
export interface ModelDetails {
  readonly parent_model: string
  readonly format: "gguf"
  readonly family: string
  readonly families: ReadonlyArray<string>
  readonly parameter_size: string
  readonly quantization_level: string
}

/** What the model file says. */
export interface ModelFile {
  readonly size: number
  readonly modifiedAt: Date
  readonly details: ModelDetails
  /** Scalar GGUF metadata, without the name and the chat template (as Ollama's `show` gives it). */
  readonly modelInfo: Readonly<Record<string, GgufHeader.GgufValue>>
  /** The chat template text (`tokenizer.chat_template`); empty when the file has none. */
  readonly template: string
  readonly license: string | undefined
  /** What the template supports beyond completion. */
  readonly templateCapabilities: ReadonlyArray<Capability>
}

/**
 * A model's capabilities: Ollama's API generates with the generation role only, so the decision
 * model is listed with none (chat and generate naming it are refused, as Ollama refuses a model
 * without the capability).
 */
export const capabilitiesOf = (model: LoadedModel, file: ModelFile): ReadonlyArray<Capability> =>
  model.role === "generation" ? ["completion", ...file.templateCapabilities] : []

/** `name` with Ollama's default tag when it has none (a tag follows the last `/`). */
export const withTag = (name: string) => (name.slice(name.lastIndexOf("/") + 1).includes(":") ? name : `${name}:latest`)

/** Whether a request's model name names `model` (Ollama's names compare without case). */
export const names = (requested: string, model: LoadedModel) => withTag(requested).toLowerCase() === model.name.toLowerCase()

const quantizationOf = (fileType: GgufHeader.GgufValue | undefined) =>
  (typeof fileType === "number" ? fileTypeName(fileType) : undefined) ?? "unknown"

/** Ollama's `format.HumanNumber`: 7.6B, 19.47M, 125K. */
export const humanNumber = (n: number): string => {
  const scaled = (unit: number, suffix: string, decimals: number) =>
    Number.isInteger(n / unit) ? `${n / unit}${suffix}` : `${(n / unit).toFixed(decimals)}${suffix}`
  if (n >= 1e9) return scaled(1e9, "B", 1)
  if (n >= 1e6) return scaled(1e6, "M", 2)
  if (n >= 1e3) return `${Math.round(n / 1e3)}K`
  return String(n)
}

/**
 * Template capabilities as Ollama infers them: tools when the template reads `tools`, thinking
 * when it writes a `<think>` block or reads `enable_thinking` (Qwen3's switch).
 */
export const templateCapabilitiesOf = (template: string): ReadonlyArray<Capability> => [
  ...(/\btools\b/.test(template) ? ["tools" as const] : []),
  ...(template.includes("<think>") || /\benable_thinking\b/.test(template) ? ["thinking" as const] : [])
]

/** A file as its path, size and modification time: its facts are read again when any changes. */
class FileKey extends Data.Class<{ readonly path: string; readonly size: number; readonly mtimeMs: number }> {}

const failedFile = (path: string, reason: string): Refusal => ({
  status: 500,
  type: "server_error",
  code: "model_file_unreadable",
  param: null,
  message: `the model file ${path} could not be read: ${reason}`
})

const reasonOf = (cause: unknown) => (cause instanceof Error ? cause.message : String(cause))

/** Reads the header through a descriptor, in windows. */
const readHeader = (path: string, size: number) =>
  Effect.acquireUseRelease(
    Effect.try({ try: () => NodeFs.openSync(path, "r"), catch: (cause) => failedFile(path, reasonOf(cause)) }),
    (fd) =>
      Effect.flatMap(
        Effect.try({
          try: () =>
            GgufHeader.read((position, length) => {
              const buffer = Buffer.allocUnsafe(length)
              return buffer.subarray(0, NodeFs.readSync(fd, buffer, 0, length, position))
            }, size),
          catch: (cause) => failedFile(path, reasonOf(cause))
        }),
        Either.match({
          onLeft: (defect) => Effect.fail(failedFile(path, `${defect.reason} (at byte ${defect.offset})`)),
          onRight: Effect.succeed
        })
      ),
    (fd) => Effect.sync(() => NodeFs.closeSync(fd))
  )

const readFile = (key: FileKey): Effect.Effect<ModelFile, Refusal> =>
  Effect.gen(function*() {
    const header = yield* readHeader(key.path, key.size)
    const template = header.metadata.get("tokenizer.chat_template")
    const license = header.metadata.get("general.license")
    const modelInfo: Record<string, GgufHeader.GgufValue> = {}
    for (const [name, value] of header.metadata) {
      if (name !== "general.name" && name !== "tokenizer.chat_template") modelInfo[name] = value
    }
    // As Ollama: the parameter count is the tensors' elements, whatever the metadata says.
    modelInfo["general.parameter_count"] = header.parameterCount
    return {
      size: key.size,
      modifiedAt: new Date(key.mtimeMs),
      details: {
        parent_model: "",
        format: "gguf",
        family: header.architecture,
        families: [header.architecture],
        parameter_size: humanNumber(header.parameterCount),
        quantization_level: quantizationOf(header.metadata.get("general.file_type"))
      },
      modelInfo,
      template: typeof template === "string" ? template : "",
      license: typeof license === "string" ? license : undefined,
      templateCapabilities: templateCapabilitiesOf(typeof template === "string" ? template : "")
    }
  })

export interface Loaded {
  readonly state: EngineState
  /** Why the state is what it is, when it is not ready. */
  readonly reason: string | null
  readonly gpu: boolean
  readonly models: ReadonlyArray<LoadedModel>
}

export class OllamaModels extends Context.Tag("nativegen/http/ollama/OllamaModels")<OllamaModels, {
  /** The engine's state, whether its device is a GPU, and its resident models. */
  readonly loaded: Effect.Effect<Loaded>
  /**
   * The resident model a request names; 404 in Ollama's words when none is. With `ready` (to
   * generate), 503 with Retry-After while the engine is not ready (starting, or being repaired);
   * without it only when the model is not listed yet.
   */
  readonly resolve: (requested: string, options: { readonly ready: boolean }) => Effect.Effect<LoadedModel, Refusal>
  /** What the model's file says (read once per file version). */
  readonly file: (model: LoadedModel) => Effect.Effect<ModelFile, Refusal>
  /**
   * The model's digest as 64 hex digits (Ollama lists it without `sha256:`): its store manifest's,
   * or for a model loaded by path the file's sha256 (hashed once per file version).
   */
  readonly digest: (model: LoadedModel) => Effect.Effect<string, Refusal>
}>() {}

export const make = Effect.gen(function*() {
  const provider = yield* Provider
  const { retryAfterSeconds } = yield* HttpConfig
  // Kept while the file is the same; a failure is not kept (the next request reads it again).
  const kept = { capacity: 16, timeToLive: (exit: Exit.Exit<unknown, unknown>) => (Exit.isSuccess(exit) ? Duration.infinity : Duration.zero) }
  const files = yield* Cache.makeWith({ ...kept, lookup: readFile })
  const hashes = yield* Cache.makeWith({
    ...kept,
    lookup: (key: FileKey) => Effect.mapBoth(hashFile(key.path), { onFailure: (cause) => failedFile(key.path, cause.message), onSuccess: (hash) => hash.hex })
  })

  const loaded = Effect.map(provider.readiness, (readiness): Loaded => ({
    state: readiness.state,
    reason: readiness.reason,
    gpu: readiness.budget?.kind === "gpu",
    models: readiness.roles.map((r): LoadedModel => ({
      role: r.role,
      name: withTag(r.model),
      modelPath: r.modelPath,
      manifestDigest: r.manifestDigest,
      admittedContext: r.admittedContext
    }))
  }))

  const resolve = Effect.fn("OllamaModels.resolve")(function*(requested: string, options: { readonly ready: boolean }) {
    const { models, reason, state } = yield* loaded
    const model = models.find((m) => names(requested, m))
    if (state !== "ready" && (options.ready || model === undefined)) {
      return yield* Effect.fail<Refusal>({
        status: 503,
        type: "unavailable_error",
        code: "engine_unavailable",
        param: null,
        message: `the engine is ${state}${reason === null ? "" : ` (${reason})`}: retry when it is ready`,
        retryAfterSeconds
      })
    }
    if (model !== undefined) return model
    return yield* Effect.fail<Refusal>({
      status: 404,
      type: "not_found_error",
      code: "model_not_found",
      param: "model",
      message: `model '${requested}' not found`
    })
  })

  const fileKey = (model: LoadedModel) =>
    Effect.map(
      Effect.try({ try: () => NodeFs.statSync(model.modelPath), catch: (cause) => failedFile(model.modelPath, reasonOf(cause)) }),
      (stat) => new FileKey({ path: model.modelPath, size: stat.size, mtimeMs: stat.mtimeMs })
    )

  const file = Effect.fn("OllamaModels.file")(function*(model: LoadedModel) {
    return yield* files.get(yield* fileKey(model))
  })

  const digest = Effect.fn("OllamaModels.digest")(function*(model: LoadedModel) {
    if (model.manifestDigest !== null && Digest.isDigest(model.manifestDigest)) return Digest.hex(model.manifestDigest)
    return yield* hashes.get(yield* fileKey(model))
  })

  return OllamaModels.of({ loaded, resolve, file, digest })
})

export const layer: Layer.Layer<OllamaModels, never, Provider | HttpConfig> = Layer.effect(OllamaModels, make)
