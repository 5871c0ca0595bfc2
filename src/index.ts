/**
 * nativegen for embedders. Build a runtime with `Runtime.layer()` (store-backed, the packaged seed
 * imported on first use) or `Runtime.layerWithModels({ generation, decision })`, then use the
 * `Provider` service; or connect to a running `nativegen serve` with `Client.layer({ socketPath })`,
 * which offers the same `Provider` over the socket.
 */
export * as Runtime from "./layers/Runtime.js"
export { Provider } from "./services/Provider.js"
export * from "./services/ProviderError.js"
export * from "./domain/Inference.js"
export * as Store from "./services/Store.js"
export * as Client from "./rpc/Client.js"
export * as Server from "./rpc/Server.js"
