/**
 * Errors of the RPC layer. The limit errors (`TooManyConnections`, `TooManyRequests`,
 * `MessageTooLarge`, `MessageTooDeep`, `TooManyPendingConnections`, `FirstMessageTimeout`,
 * `IdleTimeout`, `AckTimeout`) are part of every RPC's error schema: the server refuses one
 * request with them and keeps serving the rest, or names them in the notice it sends before it
 * closes a connection. `ConnectionFailed` is the client's own: a call whose connection was lost
 * (or never came back) fails with it. The start errors say why a server did not start; the
 * client errors why it could not reach one.
 */
import * as Schema from "effect/Schema"

/** The server already serves `limit` connections; this connection's request was refused. */
export class TooManyConnections extends Schema.TaggedError<TooManyConnections>()("TooManyConnections", {
  limit: Schema.Int
}) {
  override get message() {
    return `the server already serves its limit of ${this.limit} connections`
  }
}

/** This connection already has `limit` requests in flight; the new one was refused. */
export class TooManyRequests extends Schema.TaggedError<TooManyRequests>()("TooManyRequests", {
  limit: Schema.Int
}) {
  override get message() {
    return `the connection already has its limit of ${this.limit} requests in flight`
  }
}

/** A request's encoded message exceeded the server's limit; it was discarded unread. */
export class MessageTooLarge extends Schema.TaggedError<MessageTooLarge>()("MessageTooLarge", {
  limit: Schema.Int,
  /** Bytes received when the server stopped reading it (more than `limit`). */
  size: Schema.Int
}) {
  override get message() {
    return `a message of at least ${this.size} bytes exceeds the server's limit of ${this.limit} bytes`
  }
}

/** A message nests arrays and objects deeper than the server's limit; it was not decoded. */
export class MessageTooDeep extends Schema.TaggedError<MessageTooDeep>()("MessageTooDeep", {
  limit: Schema.Int
}) {
  override get message() {
    return `a message nests arrays and objects deeper than the server's limit of ${this.limit} levels`
  }
}

/**
 * The server already holds `limit` connections that have not sent their first request; the
 * oldest of them (this one) was closed to make room.
 */
export class TooManyPendingConnections extends Schema.TaggedError<TooManyPendingConnections>()("TooManyPendingConnections", {
  limit: Schema.Int
}) {
  override get message() {
    return `the server already holds its limit of ${this.limit} connections that have sent no request; closed the oldest`
  }
}

/** The connection sent no request within `timeoutMillis` of connecting; it was closed. */
export class FirstMessageTimeout extends Schema.TaggedError<FirstMessageTimeout>()("FirstMessageTimeout", {
  timeoutMillis: Schema.Int
}) {
  override get message() {
    return `the connection sent no request within ${this.timeoutMillis} ms of connecting`
  }
}

/** The connection had no request in flight for `timeoutMillis`; it was closed. */
export class IdleTimeout extends Schema.TaggedError<IdleTimeout>()("IdleTimeout", {
  timeoutMillis: Schema.Int
}) {
  override get message() {
    return `the connection was idle (no request in flight) for ${this.timeoutMillis} ms`
  }
}

/** A stream's client took no chunk (sent no ack) within `timeoutMillis`; the stream was cancelled. */
export class AckTimeout extends Schema.TaggedError<AckTimeout>()("AckTimeout", {
  timeoutMillis: Schema.Int
}) {
  override get message() {
    return `the client took no streamed chunk within ${this.timeoutMillis} ms; the stream was cancelled`
  }
}

/** Every refusal of the RPC layer itself. */
export const RpcLimitError = Schema.Union(
  TooManyConnections,
  TooManyRequests,
  MessageTooLarge,
  MessageTooDeep,
  TooManyPendingConnections,
  FirstMessageTimeout,
  IdleTimeout,
  AckTimeout
)
export type RpcLimitError = typeof RpcLimitError.Type

/**
 * The client's connection to the server failed while a call was in flight, or was not
 * re-established within the client's wait. Never sent by a server: the client fails a call with
 * it (it is in the error schemas so that the client can).
 */
export class ConnectionFailed extends Schema.TaggedError<ConnectionFailed>()("ConnectionFailed", {
  socketPath: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `the connection to the nativegen server on ${this.socketPath} failed: ${this.reason}`
  }
}

/** What any call can fail with because of the RPC layer: a refusal, or a failed connection. */
export const RpcLayerError = Schema.Union(RpcLimitError, ConnectionFailed)
export type RpcLayerError = typeof RpcLayerError.Type

// ---------------------------------------------------------------------------------------------
// Server start
// ---------------------------------------------------------------------------------------------

/** Another server is listening on the socket (or holds its lock file). */
export class AlreadyRunning extends Schema.TaggedError<AlreadyRunning>()("AlreadyRunning", {
  socketPath: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `a nativegen server is already running on ${this.socketPath} (${this.reason})`
  }
}

/** The socket's directory is not a private directory of this user. */
export class UnsafeSocketDirectory extends Schema.TaggedError<UnsafeSocketDirectory>()("UnsafeSocketDirectory", {
  path: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `refusing socket directory ${this.path}: ${this.reason}`
  }
}

/** Something that is not a socket occupies the socket path. */
export class SocketPathOccupied extends Schema.TaggedError<SocketPathOccupied>()("SocketPathOccupied", {
  socketPath: Schema.String,
  found: Schema.String
}) {
  override get message() {
    return `refusing to replace ${this.socketPath}: it is a ${this.found}, not a socket`
  }
}

/** The operating system refused to create, lock or bind the socket. */
export class ListenFailed extends Schema.TaggedError<ListenFailed>()("ListenFailed", {
  socketPath: Schema.String,
  operation: Schema.String,
  cause: Schema.Defect
}) {
  override get message() {
    const code = typeof this.cause === "object" && this.cause !== null && "code" in this.cause
      ? ` (${String(this.cause.code)})`
      : ""
    return `cannot ${this.operation} ${this.socketPath}${code}`
  }
}

export type ServerStartError = AlreadyRunning | UnsafeSocketDirectory | SocketPathOccupied | ListenFailed

// ---------------------------------------------------------------------------------------------
// Client
// ---------------------------------------------------------------------------------------------

/** No server could be reached on the socket when the client layer was built. */
export class ConnectError extends Schema.TaggedError<ConnectError>()("ConnectError", {
  socketPath: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `cannot connect to a nativegen server on ${this.socketPath}: ${this.reason}`
  }
}

/** The connection to the server failed while a call was in flight (or was not re-established yet). */
export class RemoteUnavailable extends Schema.TaggedError<RemoteUnavailable>()("RemoteUnavailable", {
  socketPath: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `the nativegen server on ${this.socketPath} is unavailable: ${this.reason}`
  }
}
