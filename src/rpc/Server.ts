/**
 * The RPC server: `NativegenRpcs` over the Provider and the Store, on a Unix socket in a private
 * directory (see `SocketDirectory`), with limits on message size and depth, connections (pending,
 * admitted, idle) and a deadline on streams' acks (see `Protocol`), and a cap on the requests in
 * flight per connection (the `InFlightLimit` middleware on every RPC). Building the layer claims the socket and listens;
 * closing its scope interrupts every request, closes every connection (forcibly after a short
 * grace for a client that does not read), removes the socket and releases the lock.
 */
import * as NodeSocket from "@effect/platform-node/NodeSocket"
import * as NodeSocketServer from "@effect/platform-node/NodeSocketServer"
import * as SocketServer from "@effect/platform/SocketServer"
import * as RpcServer from "@effect/rpc/RpcServer"
import * as Config from "effect/Config"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import type * as Net from "node:net"
import * as Os from "node:os"
import * as Path from "node:path"
import { setting } from "../internal/ConfigLayers.js"
import type { Provider } from "../services/Provider.js"
import type { Store } from "../services/Store.js"
import { NativegenRpcs } from "./Api.js"
import * as Handlers from "./Handlers.js"
import * as InFlightLimit from "./InFlightLimit.js"
import * as Protocol from "./Protocol.js"
import { AlreadyRunning, ListenFailed, type ServerStartError } from "./RpcError.js"
import * as SocketDirectory from "./SocketDirectory.js"

export { AlreadyRunning, ListenFailed, SocketPathOccupied, UnsafeSocketDirectory } from "./RpcError.js"
export type { ServerStartError } from "./RpcError.js"

export interface ServerOptions {
  /** The Unix socket. Its directory is created 0700 when absent, refused when it is not private. Default `defaultSocketPath()`. */
  socketPath: string
  /** Largest inbound message (one request, JSON-encoded) in bytes; a larger one fails with `MessageTooLarge`. Default 1 MiB. */
  maxMessageBytes: number
  /**
   * Connections served at once (those that sent a request). When all are, the one idle longest is
   * closed for a newcomer; when none is idle, the newcomer's request fails with `TooManyConnections`. Default 64.
   */
  maxConnections: number
  /** Connections that have not sent their first request; a newer one closes the oldest. Default 64. */
  maxPendingConnections: number
  /** Requests (streams included) in flight on one connection; more fail with `TooManyRequests`. Default 64. */
  maxInFlightPerConnection: number
  /** A connection that sends no request within this time of connecting is closed. Default 10 seconds. */
  firstMessageTimeout: Duration.Duration
  /** A connection with no request in flight for this long is closed. Default 5 minutes. */
  idleTimeout: Duration.Duration
  /** A stream whose client takes no chunk for this long is cancelled with `AckTimeout`. Default 60 seconds. */
  ackTimeout: Duration.Duration
}

/** `$XDG_RUNTIME_DIR/nativegen/nativegen.sock`, else `<tmpdir>/nativegen-<uid>/nativegen.sock`. */
export const defaultSocketPath = (): string => {
  const runtimeDir = process.env.XDG_RUNTIME_DIR
  return runtimeDir !== undefined && runtimeDir !== "" && Path.isAbsolute(runtimeDir)
    ? Path.join(runtimeDir, "nativegen", "nativegen.sock")
    : Path.join(Os.tmpdir(), `nativegen-${process.getuid?.() ?? Os.userInfo().username}`, "nativegen.sock")
}

export const defaults: ServerOptions = {
  socketPath: defaultSocketPath(),
  maxMessageBytes: 1024 * 1024,
  maxConnections: 64,
  maxPendingConnections: 64,
  maxInFlightPerConnection: 64,
  firstMessageTimeout: Duration.seconds(10),
  idleTimeout: Duration.minutes(5),
  ackTimeout: Duration.seconds(60)
}

/** The options other than the socket from NATIVEGEN_SERVER_* (the environment by default), else `defaults`. */
export const config: Config.Config<Omit<ServerOptions, "socketPath">> = Config.all({
  maxMessageBytes: setting(
    "integer",
    "NATIVEGEN_SERVER_MAX_MESSAGE_BYTES",
    defaults.maxMessageBytes,
    "largest request in bytes (JSON-encoded)"
  ),
  maxConnections: setting(
    "integer",
    "NATIVEGEN_SERVER_MAX_CONNECTIONS",
    defaults.maxConnections,
    "connections served at once"
  ),
  maxPendingConnections: setting(
    "integer",
    "NATIVEGEN_SERVER_MAX_PENDING_CONNECTIONS",
    defaults.maxPendingConnections,
    "connections that have not sent their first request"
  ),
  maxInFlightPerConnection: setting(
    "integer",
    "NATIVEGEN_SERVER_MAX_IN_FLIGHT_PER_CONNECTION",
    defaults.maxInFlightPerConnection,
    "requests in flight on one connection"
  ),
  firstMessageTimeout: setting(
    "duration",
    "NATIVEGEN_SERVER_FIRST_MESSAGE_TIMEOUT",
    defaults.firstMessageTimeout,
    "how long a new connection may take to send its first request"
  ),
  idleTimeout: setting(
    "duration",
    "NATIVEGEN_SERVER_IDLE_TIMEOUT",
    defaults.idleTimeout,
    "how long a connection may stay without a request in flight"
  ),
  ackTimeout: setting(
    "duration",
    "NATIVEGEN_SERVER_ACK_TIMEOUT",
    defaults.ackTimeout,
    "how long a stream waits for its client to take a chunk"
  )
})

/** How long closing waits for connections to drain before destroying them. */
const closeGrace = "2 seconds"

const checkOptions = (options: ServerOptions) =>
  Effect.suspend(() => {
    for (const key of ["maxMessageBytes", "maxConnections", "maxPendingConnections", "maxInFlightPerConnection"] as const) {
      const value = options[key]
      if (!Number.isSafeInteger(value) || value < 1) {
        return Effect.dieMessage(`rpc server: ${key} must be a positive whole number, got ${value}`)
      }
    }
    for (const key of ["firstMessageTimeout", "idleTimeout", "ackTimeout"] as const) {
      const value = options[key]
      if (!Duration.isFinite(value) || Duration.toMillis(value) < 1) {
        return Effect.dieMessage(`rpc server: ${key} must be a finite duration of at least 1 ms, got ${Duration.format(value)}`)
      }
    }
    return Effect.void
  })

const codeOf = (cause: unknown): string | undefined =>
  typeof cause === "object" && cause !== null && "code" in cause && typeof cause.code === "string" ? cause.code : undefined

/**
 * Claims the socket and listens on it. The returned server tracks its connections so that
 * closing can destroy the ones that do not drain.
 */
const listen = (
  options: ServerOptions
): Effect.Effect<SocketServer.SocketServer["Type"], ServerStartError, Scope.Scope> =>
  Effect.gen(function*() {
    yield* checkOptions(options)
    const socketPath = Path.resolve(options.socketPath)
    if (Buffer.byteLength(socketPath) > SocketDirectory.maxSocketPathBytes) {
      return yield* Effect.fail(
        new ListenFailed({
          socketPath,
          operation: "bind",
          cause: new Error(`a Unix socket path has at most ${SocketDirectory.maxSocketPathBytes} bytes`)
        })
      )
    }
    const server = yield* SocketDirectory.listenOn(
      socketPath,
      NodeSocketServer.make({ path: socketPath }).pipe(
        Effect.mapError((error) =>
          codeOf(error.cause) === "EADDRINUSE"
            ? new AlreadyRunning({ socketPath, reason: "the address is in use" })
            : new ListenFailed({ socketPath, operation: "listen on", cause: error.cause })
        )
      )
    )

    const open = new Set<Net.Socket>()
    yield* Effect.addFinalizer(() =>
      Effect.forEach(
        open,
        (conn) =>
          Effect.async<void>((resume) => {
            if (conn.closed) return resume(Effect.void)
            conn.once("close", () => resume(Effect.void))
          }),
        { concurrency: "unbounded", discard: true }
      ).pipe(
        // Finalizers are uninterruptible: only an interruptible wait can be cut short by the timeout.
        Effect.interruptible,
        Effect.timeoutOption(closeGrace),
        Effect.flatMap(() => Effect.sync(() => open.forEach((conn) => conn.destroy())))
      )
    )
    yield* Effect.logInfo("rpc: listening").pipe(
      Effect.annotateLogs({
        service: "RpcServer",
        socketPath,
        maxMessageBytes: options.maxMessageBytes,
        maxConnections: options.maxConnections,
        maxPendingConnections: options.maxPendingConnections,
        maxInFlightPerConnection: options.maxInFlightPerConnection,
        firstMessageTimeout: Duration.format(options.firstMessageTimeout),
        idleTimeout: Duration.format(options.idleTimeout),
        ackTimeout: Duration.format(options.ackTimeout)
      })
    )
    return SocketServer.SocketServer.of({
      address: server.address,
      run: (handler) =>
        server.run((socket) =>
          Effect.flatMap(Effect.serviceOption(NodeSocket.NetSocket), (conn) => {
            // Tracked until the connection is closed (not until its handler ends: a connection
            // whose handler ended may still wait for a client to read before it closes).
            if (Option.isSome(conn) && !conn.value.closed) {
              open.add(conn.value)
              conn.value.once("close", () => open.delete(conn.value))
            }
            return handler(socket)
          })
        )
    })
  })

/**
 * Serves `NativegenRpcs` over the Provider and Store in context on `options.socketPath`. Fails
 * to build with `AlreadyRunning` (a live server on the socket, or one holding its lock),
 * `UnsafeSocketDirectory` (the directory is a symlink, not ours, or open to others),
 * `SocketPathOccupied` (a non-socket on the path) or `ListenFailed`.
 */
export const layer = (options: ServerOptions): Layer.Layer<never, ServerStartError, Provider | Store> => {
  const socketServer = Layer.scoped(SocketServer.SocketServer, listen(options))
  const protocol = Layer.scoped(RpcServer.Protocol, Protocol.make(NativegenRpcs, Protocol.limitsOf(options))).pipe(
    Layer.provide(socketServer)
  )
  // The served group carries the middleware; clients use `NativegenRpcs` as it is (every RPC's
  // error schema already has `TooManyRequests`), so the wire is the same.
  return RpcServer.layer(NativegenRpcs.middleware(InFlightLimit.InFlightLimit), {
    disableFatalDefects: true,
    spanPrefix: "NativegenRpc"
  }).pipe(
    Layer.provide(Handlers.layer),
    Layer.provide(InFlightLimit.layer(options.maxInFlightPerConnection)),
    Layer.provide(protocol)
  )
}
