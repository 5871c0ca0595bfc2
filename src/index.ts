/**
 * nativegen for embedders. Build a runtime with `Runtime.layer()` (store-backed, the packaged seed
 * imported on first use) or `Runtime.layerWithModels({ generation, decision })`, then use the
 * `Provider` service; or connect to a running `nativegen serve` with `Client.layer({ socketPath })`,
 * which offers the same `Provider` over the socket.
 *
 * This is the whole public surface (the package exports nothing else): the runtime layers and why
 * they fail to start, the Provider with its request and response schemas and its errors, the
 * store service with its configuration and errors, the client and the server. Workers, admission,
 * the scheduler and the engine protocol stay internal.
 */
export * as Runtime from "./layers/Runtime.js"

export { Provider } from "./services/Provider.js"
export {
  Channel,
  ChatMessage,
  ChatRole,
  Checkpoint,
  CountRequest,
  CountResult,
  DecideRequest,
  DecideResult,
  DecisionHead,
  EngineState,
  GenerateChunk,
  GenerateRequest,
  GenerationLane,
  LabelDecision,
  PrepareRequest,
  PrepareResult,
  Readiness,
  ReuseKind,
  Role,
  Sampling,
  StopReason,
  Timings,
  TokenizeRequest,
  TokenizeResult,
  ToolDefinition,
  Usage
} from "./domain/Inference.js"

// Every way a Provider call fails: the union and its members (the engine child's own errors are
// mapped to these at the worker and never reach a caller).
export { InvalidCheckpoint, InvalidRequest, ProviderError, QueueFull, QueueTimeout } from "./services/ProviderError.js"
export { EngineFailure, EngineUnavailable, GenerationFailed, TemplateError } from "./domain/EngineError.js"
export { ContextAdmissionFailed, ContextExceeded, RoleNotAdmitted, WorkspaceTooLarge } from "./services/AdmissionError.js"
export { MalformedChannel } from "./services/ChannelDecoder.js"

export * as Store from "./services/Store.js"
export { StoreError } from "./services/StoreError.js"

export * as Client from "./rpc/Client.js"
export * as Server from "./rpc/Server.js"
