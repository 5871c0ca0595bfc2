/**
 * A real runtime (engine child on the generated models) behind the HTTP server on a free
 * loopback port, for the HTTP tests: `httpServer()` in a scope gives the base URL, the
 * Provider (to watch readiness and the scheduler) and the HTTP requests in flight (`inFlight.current`).
 * Each call builds its own runtime.
 */
import type * as HttpServer from "@effect/platform/HttpServer"
import * as HttpServerTag from "@effect/platform/HttpServer"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { ensureModel } from "../../fixtures/models.js"
import { HttpConfig, type HttpConfigShape } from "../../src/http/HttpConfig.js"
import { InFlight } from "../../src/http/InFlight.js"
import * as Http from "../../src/http/Server.js"
import type { RuntimeOptions } from "../../src/layers/Runtime.js"
import { Provider } from "../../src/services/Provider.js"
import { runtimeLayer } from "../support/engine.js"

export interface HttpServerOptions {
  readonly http?: Partial<HttpConfigShape>
  readonly runtime?: Partial<RuntimeOptions>
  /** The generation model (default qwen-chat: Qwen3's real tokenizer and template) and the decision model. */
  readonly models?: { readonly generation?: string; readonly decision?: string }
}

const urlOf = (address: HttpServer.Address) =>
  address._tag === "TcpAddress" ? `http://${address.hostname}:${address.port}` : `unix:${address.path}`

/** A runtime and its HTTP server in the current scope. */
export const httpServer = (options: HttpServerOptions = {}) =>
  Effect.gen(function*() {
    const config: HttpConfigShape = { ...HttpConfig.defaults, listen: { _tag: "Tcp", host: "127.0.0.1", port: 0 }, ...options.http }
    const runtime = runtimeLayer(options.runtime, {
      generation: options.models?.generation ?? ensureModel("qwen-chat"),
      decision: options.models?.decision ?? ensureModel("qwen-decision")
    })
    // Built once and handed to the server: the runtime layer is fresh, and Layer.provideMerge
    // would build it a second time (a second engine the server uses and the test cannot see).
    const runtimeContext = yield* Layer.build(runtime)
    const context = Context.merge(runtimeContext, yield* Layer.build(Http.layer(config).pipe(Layer.provide(Layer.succeedContext(runtimeContext)))))
    const server = HttpServerTag.HttpServer
    const { address } = yield* Effect.provide(server, context)
    const provider = yield* Effect.provide(Provider, context)
    const inFlight = yield* Effect.provide(InFlight, context)
    return { baseUrl: urlOf(address), address, provider, config, inFlight }
  })

/** A running server, as a service: share one per file with `layer(HttpTest.layer(...))(...)` from @effect/vitest. */
export class HttpTest extends Context.Tag("test/HttpTest")<HttpTest, Effect.Effect.Success<ReturnType<typeof httpServer>>>() {
  static readonly layer = (options: HttpServerOptions = {}) => Layer.scoped(HttpTest, httpServer(options))
}
