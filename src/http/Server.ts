/**
 * The HTTP server: OpenAI's and Ollama's APIs and the health check over the same Provider as the
 * RPC socket (no second runtime), on a TCP address or a Unix socket. Every request passes the gate
 * (API key, body size, in-flight limit) before its route; connections are limited in number, and
 * slow clients by header and request timeouts on the Node server.
 *
 * A Unix socket is claimed as the RPC socket is (SocketDirectory): in a private 0700 directory,
 * under a lock, a stale socket replaced only after a probe finds no listener, never a symlink or
 * another kind of file.
 */
import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import * as HttpServer from "@effect/platform/HttpServer"
import { ServeError } from "@effect/platform/HttpServerError"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Http from "node:http"
import * as Path from "node:path"
import type { AlreadyRunning, ListenFailed, SocketPathOccupied, UnsafeSocketDirectory } from "../rpc/RpcError.js"
import * as SocketDirectory from "../rpc/SocketDirectory.js"
import type { Provider } from "../services/Provider.js"
import * as Console from "./Console.js"
import * as Gate from "./Gate.js"
import * as Health from "./Health.js"
import { formatListen, HttpConfig, type HttpConfigShape, type Listen } from "./HttpConfig.js"
import * as InFlight from "./InFlight.js"
import * as KeyedConversations from "./KeyedConversations.js"
import * as Models from "./Models.js"
import * as Ollama from "./Ollama.js"
import * as OpenAi from "./OpenAi.js"
import * as Status from "./Status.js"

/** Every route, each module's own layer. */
export const routes = Layer.mergeAll(Health.routes, OpenAi.routes, Ollama.routes, Status.routes, Models.routes, Console.routes)

/** The server could not listen on its address (in use, not an address of this machine, no permission). */
export class HttpListenFailed extends Data.TaggedError("HttpListenFailed")<{
  readonly address: string
  readonly cause: unknown
}> {
  override get message() {
    const reason = this.cause instanceof ServeError && this.cause.cause instanceof Error ? this.cause.cause.message : String(this.cause)
    return `cannot serve HTTP on ${this.address}: ${reason}`
  }
}

/** Why the server could not start listening. */
export type ListenError = HttpListenFailed | AlreadyRunning | ListenFailed | SocketPathOccupied | UnsafeSocketDirectory

/**
 * A Node server with the configured connection limit and slow-client timeouts. Node checks the
 * timeouts every `connectionsCheckingInterval` (30 s by default): a quarter of the shorter one, at
 * most a second, so that a timeout is kept to within that.
 */
const nodeServer = (config: HttpConfigShape) => {
  const shortest = Math.min(config.headersTimeoutMillis, config.requestTimeoutMillis)
  const server = Http.createServer({
    connectionsCheckingInterval: Math.max(1, Math.min(1_000, Math.floor(shortest / 4))),
    headersTimeout: config.headersTimeoutMillis,
    requestTimeout: config.requestTimeoutMillis
  })
  server.maxConnections = config.maxConnections
  return server
}

/** How long closing waits for requests in progress (streams included) before cutting their connections. */
const closeGrace = "2 seconds"

/**
 * The Node server listening on `options`. Closing stops accepting, lets requests in progress
 * finish for `closeGrace`, then closes every connection: a stream still running is interrupted
 * (the server interrupts a handler whose connection closes), so shutdown never waits on a client.
 */
const listening = (config: HttpConfigShape, listen: Listen) =>
  Effect.gen(function*() {
    const server = nodeServer(config)
    const options = listen._tag === "Tcp" ? { host: listen.host, port: listen.port } : { path: listen.path }
    const httpServer = yield* NodeHttpServer.make(() => server, options).pipe(
      Effect.mapError((cause) => new HttpListenFailed({ address: formatListen(listen), cause }))
    )
    // Runs before NodeHttpServer's own release (which closes only a server still listening).
    yield* Effect.addFinalizer(() =>
      Effect.async<void>((resume) => {
        server.close(() => resume(Effect.void))
      }).pipe(
        Effect.interruptible,
        Effect.timeoutOption(closeGrace),
        Effect.zipRight(Effect.sync(() => server.closeAllConnections()))
      )
    )
    return httpServer
  })

/** Listens on a TCP address, or on a Unix socket it claimed. */
const listener = (config: HttpConfigShape): Layer.Layer<HttpServer.HttpServer, ListenError> => {
  const listen = config.listen
  if (listen._tag === "Tcp") {
    return Layer.scoped(HttpServer.HttpServer, listening(config, listen))
  }
  return Layer.scoped(
    HttpServer.HttpServer,
    Effect.gen(function*() {
      const socketPath = Path.resolve(listen.path)
      if (Buffer.byteLength(socketPath) > SocketDirectory.maxSocketPathBytes) {
        return yield* new HttpListenFailed({
          address: socketPath,
          cause: new Error(`a Unix socket path has at most ${SocketDirectory.maxSocketPathBytes} bytes`)
        })
      }
      return yield* SocketDirectory.listenOn(socketPath, listening(config, { _tag: "Unix", path: socketPath }))
    })
  )
}

/**
 * A server with `routes` (HttpLayerRouter layers) behind the gate, on `config.listen`. Its
 * HttpServer (with the bound address) and the in-flight count are kept in the output.
 */
export const serve = <E, R>(
  config: HttpConfigShape,
  routes: Layer.Layer<never, E, R>
) =>
  Layer.unwrapEffect(
    Effect.map(Gate.make, (middleware) => HttpLayerRouter.serve(routes, { disableLogger: true, disableListenLog: true, middleware }))
  ).pipe(
    Layer.provideMerge(InFlight.layer),
    Layer.provide(Layer.succeed(HttpConfig, config)),
    Layer.provideMerge(Layer.merge(listener(config), NodeHttpServer.layerContext))
  )

/** The server with every route, over the Provider. */
export const layer = (config: HttpConfigShape): Layer.Layer<HttpServer.HttpServer | InFlight.InFlight, ListenError, Provider> =>
  serve(config, routes).pipe(Layer.provide(KeyedConversations.layer))
