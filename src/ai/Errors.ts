/**
 * nativegen's errors as @effect/ai's `AiError` variants, the original kept as the cause (its tag
 * and fields intact) and its message as the description: what the request got wrong (a field, a
 * checkpoint, a context limit, the template refusing the messages) is `MalformedInput`; output the
 * runtime could not read is `MalformedOutput`; everything else (the engine unavailable or failing,
 * a full queue, the device budget) is `UnknownError`. @effect/ai's HTTP variants never apply.
 */
import * as AiError from "@effect/ai/AiError"
import type { ProviderError } from "../services/ProviderError.js"

export const toAiError = (module: string, method: string) => (error: ProviderError): AiError.AiError => {
  const params = { module, method, description: error.message, cause: error }
  switch (error._tag) {
    case "InvalidRequest":
    case "InvalidCheckpoint":
    case "ContextExceeded":
    case "TemplateError":
      return new AiError.MalformedInput(params)
    case "MalformedChannel":
      return new AiError.MalformedOutput(params)
    case "EngineUnavailable":
    case "GenerationFailed":
    case "EngineFailure":
    case "RoleNotAdmitted":
    case "ContextAdmissionFailed":
    case "WorkspaceTooLarge":
    case "QueueFull":
    case "QueueTimeout":
      return new AiError.UnknownError(params)
  }
}
