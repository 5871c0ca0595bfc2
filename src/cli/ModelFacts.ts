/**
 * What a model file says about itself, read from its GGUF header on the host (src/domain/GgufHeader.ts;
 * never node-llama-cpp): architecture, parameter count, quantization (`general.file_type`, else
 * the tensor type holding most elements), trained context (`<architecture>.context_length`),
 * chat template and license.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Fs from "node:fs"
import { fileTypeName } from "../domain/GgufFileType.js"
import * as GgufHeader from "../domain/GgufHeader.js"
import { CliFileError, reasonOf } from "./CliError.js"

export interface ModelFacts {
  readonly architecture: string
  readonly parameterCount: number
  /** `Q8_0`, `F16`, `Q4_K_M`, ...: llama.cpp's name of the file type, or of its dominant tensor type. */
  readonly quantization: string
  /** `general.file_type` as written, when present. */
  readonly fileType: number | null
  readonly trainedContext: number | null
  readonly chatTemplate: string | null
  readonly license: string | null
}

const text = (value: GgufHeader.GgufValue | undefined): string | null => (typeof value === "string" ? value : null)
const count = (value: GgufHeader.GgufValue | undefined): number | null => (typeof value === "number" ? value : null)

/** The facts of a checked header. */
export const factsOf = (header: GgufHeader.GgufHeader): ModelFacts => {
  const fileType = count(header.metadata.get("general.file_type"))
  const dominant = [...header.elementsByType].reduce<readonly [string, number]>(
    (best, entry) => (entry[1] > best[1] ? entry : best),
    ["unknown", -1]
  )[0]
  const named = fileType === null ? undefined : fileTypeName(fileType)
  return {
    architecture: header.architecture,
    parameterCount: header.parameterCount,
    quantization: named ?? (fileType === null ? dominant : `${dominant} (file type ${fileType})`),
    fileType,
    trainedContext: count(header.metadata.get(`${header.architecture}.context_length`)),
    chatTemplate: text(header.metadata.get("tokenizer.chat_template")),
    license: text(header.metadata.get("general.license"))
  }
}

/** Reads the header of the GGUF file at `path` (the header only, in windows). */
export const read = (path: string): Effect.Effect<ModelFacts, CliFileError> =>
  Effect.acquireUseRelease(
    Effect.try({ try: () => Fs.openSync(path, "r"), catch: (cause) => new CliFileError({ path, reason: reasonOf(cause) }) }),
    (fd) =>
      Effect.try({
        try: () =>
          GgufHeader.read((position, length) => {
            const buffer = Buffer.allocUnsafe(length)
            return buffer.subarray(0, Fs.readSync(fd, buffer, 0, length, position))
          }, Fs.fstatSync(fd).size),
        catch: (cause) => new CliFileError({ path, reason: reasonOf(cause) })
      }).pipe(
        Effect.flatMap(Either.match({
          onLeft: (defect) => Effect.fail(new CliFileError({ path, reason: `not a GGUF model: ${defect.reason} (at byte ${defect.offset})` })),
          onRight: (header) => Effect.succeed(factsOf(header))
        }))
      ),
    (fd) => Effect.sync(() => Fs.closeSync(fd))
  )

/** `596.0M`, `1.2B`, `20`: a parameter count as people write it. */
export const formatParameters = (n: number): string => {
  if (n >= 1e9) return `${(n / 1e9).toFixed(1)}B`
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)}M`
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)}K`
  return String(n)
}
