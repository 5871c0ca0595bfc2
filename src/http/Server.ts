/**
 * The HTTP server: OpenAI's and Ollama's APIs and the health check over the same Provider as the
 * RPC socket (no second runtime), on a TCP address or a Unix socket. Every request passes the API
 * key check and the in-flight limit before its route; request bodies are limited in size, and
 * slow clients by header and request timeouts on the Node server.
 */
import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import type * as HttpServer from "@effect/platform/HttpServer"
import type { ServeError } from "@effect/platform/HttpServerError"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as Layer from "effect/Layer"
import * as Http from "node:http"
import type { Provider } from "../services/Provider.js"
import * as Console from "./Console.js"
import * as Health from "./Health.js"
import { HttpConfig, type HttpConfigShape, type Listen } from "./HttpConfig.js"
import * as KeyedConversations from "./KeyedConversations.js"
import * as Models from "./Models.js"
import * as Ollama from "./Ollama.js"
import * as OpenAi from "./OpenAi.js"
import * as Status from "./Status.js"

/** Every route, each module's own layer. */
export const routes = Layer.mergeAll(Health.routes, OpenAi.routes, Ollama.routes, Status.routes, Models.routes, Console.routes)

const listenOptions = (listen: Listen) => (listen._tag === "Tcp" ? { host: listen.host, port: listen.port } : { path: listen.path })

/** A Node server with the configured connection limit and slow-client timeouts. */
const nodeServer = (config: HttpConfigShape) => () => {
  const server = Http.createServer()
  server.maxConnections = config.maxConnections
  server.headersTimeout = config.headersTimeoutMillis
  server.requestTimeout = config.requestTimeoutMillis
  return server
}

/** The server on `config.listen`; its HttpServer (with the bound address) is kept in the output. */
export const layer = (config: HttpConfigShape): Layer.Layer<HttpServer.HttpServer, ServeError, Provider> =>
  HttpLayerRouter.serve(routes, { disableLogger: true, disableListenLog: true }).pipe(
    Layer.provide(KeyedConversations.layer),
    Layer.provide(Layer.succeed(HttpConfig, config)),
    Layer.provideMerge(NodeHttpServer.layer(nodeServer(config), listenOptions(config.listen)))
  )
