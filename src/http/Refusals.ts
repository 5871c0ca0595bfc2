/**
 * What an HTTP client is told when the runtime refuses or fails a request, one classification
 * both APIs share: the status, a machine-readable code, the field at fault (when there is one),
 * the message, and for refusals that pass (a full queue, an engine starting or being repaired)
 * how long to wait. OpenAI's and Ollama's routes only shape the body.
 */
import type { ProviderError } from "../services/ProviderError.js"

export interface Refusal {
  readonly status: 400 | 401 | 403 | 404 | 413 | 429 | 500 | 501 | 503
  /** OpenAI's `error.type`. */
  readonly type: "invalid_request_error" | "authentication_error" | "permission_error" | "not_found_error" | "rate_limit_error" | "server_error" | "unavailable_error"
  /** OpenAI's `error.code`: a stable name for the case (`context_length_exceeded`, `queue_full`, ...). */
  readonly code: string
  /** The request field at fault (OpenAI's `error.param`), as the client named it where known. */
  readonly param: string | null
  readonly message: string
  /** Seconds before a retry may succeed (sent as Retry-After), for 429 and 503. */
  readonly retryAfterSeconds?: number | undefined
}

export const badRequest = (message: string, param: string | null = null, code = "invalid_value"): Refusal => ({
  status: 400,
  type: "invalid_request_error",
  code,
  param,
  message
})

/**
 * The refusal for a Provider error. `retryAfterSeconds` is what 429 and 503 carry. Field names in
 * InvalidRequest are nativegen's (`maxTokens`, `tools[1].name`); the API's own mapping may rename
 * `param` to the client's vocabulary.
 */
export const refusalOf = (error: ProviderError, retryAfterSeconds: number): Refusal => {
  switch (error._tag) {
    case "InvalidRequest":
      return badRequest(error.message, error.field)
    case "InvalidCheckpoint":
      return badRequest(error.message, "conversation", "invalid_checkpoint")
    case "ContextExceeded":
      return badRequest(error.message, "messages", "context_length_exceeded")
    case "TemplateError":
      return badRequest(error.message, "messages", "template_error")
    case "QueueFull":
      return { status: 429, type: "rate_limit_error", code: "queue_full", param: null, message: error.message, retryAfterSeconds }
    case "QueueTimeout":
    case "EngineUnavailable":
    case "RoleNotAdmitted":
      return { status: 503, type: "unavailable_error", code: "engine_unavailable", param: null, message: error.message, retryAfterSeconds }
    case "WorkspaceTooLarge":
    case "ContextAdmissionFailed":
      return { status: 503, type: "unavailable_error", code: "insufficient_memory", param: null, message: error.message, retryAfterSeconds }
    case "EngineFailure":
    case "GenerationFailed":
      return { status: 503, type: "unavailable_error", code: "engine_failed", param: null, message: error.message, retryAfterSeconds }
    case "MalformedChannel":
      return { status: 500, type: "server_error", code: "malformed_output", param: null, message: error.message }
  }
}
