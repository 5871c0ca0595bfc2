/**
 * The client's side of the wire: newline-delimited JSON over one Unix-socket connection at a
 * time, as an `RpcClient.Protocol`. Unlike the stock socket protocol it outlives the server's
 * connection (an idle close, a limit, a restart):
 *
 * - The connection is opened by `connect`, and after it is lost again only when a call needs it.
 * - A call made while there is no connection waits for one for at most `reconnectTimeout`, then
 *   fails with why: the server's last closing notice (a limit error), or `ConnectionFailed` naming
 *   the socket and the last reason. The connection is retried on `reconnectSchedule`: a connection
 *   fails when it cannot be opened or is lost before the server answered anything; one that was
 *   answered starts the schedule afresh.
 * - When the connection is lost, a call the server had answered in part (a chunk of a stream) fails
 *   with `ConnectionFailed`: nothing it delivered is repeated. A call the server had not answered
 *   at all is sent again on the next connection (waiting as above): the server never started it,
 *   or stopped it with the connection before it produced anything. A server that closes a
 *   connection for a limit first sends a notice and runs no request it had not read by then.
 * - A ping every `pingInterval`; a connection whose previous ping is unanswered is dropped.
 */
import type { FromServerEncoded, ResponseExitEncoded } from "@effect/rpc/RpcMessage"
import * as RpcClient from "@effect/rpc/RpcClient"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as FiberId from "effect/FiberId"
import * as Queue from "effect/Queue"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as Net from "node:net"
import { ConnectionFailed, RpcLayerError, RpcLimitError } from "./RpcError.js"

export interface ClientProtocolOptions {
  /** The server's socket (absolute). */
  readonly socketPath: string
  /** How long a call waits for a connection before it fails. */
  readonly reconnectTimeout: Duration.Duration
  /** How often the connection is pinged; a ping unanswered by the next one drops it. */
  readonly pingInterval: Duration.Duration
}

/** Why a connection could not be opened: the errno code (`ENOENT`, `ECONNREFUSED`, ...) when there is one. */
export interface OpenFailure {
  readonly code: string | undefined
  readonly message: string
}

/** A request written on a connection: its line until the server answers it. */
interface Sent {
  line: string | undefined
  /** When it stops waiting for a connection that answers, if it waited for this one. */
  readonly deadline: number | undefined
}

interface Live {
  readonly socket: Net.Socket
  readonly sent: Map<string, Sent>
  pongDue: boolean
  /** Whether the server answered any call on it. */
  answered: boolean
  /** Completed with why, when it is lost. */
  readonly lost: Deferred.Deferred<RpcLayerError>
}

const decodeNotice = Schema.decodeUnknownEither(RpcLimitError)
const encodeLayerError = Schema.encodeSync(RpcLayerError)
const pingLine = JSON.stringify({ _tag: "Ping" }) + "\n"

const failureExit = (requestId: string, error: RpcLayerError): ResponseExitEncoded => ({
  _tag: "Exit",
  requestId,
  exit: { _tag: "Failure", cause: { _tag: "Fail", error: encodeLayerError(error) } }
})

const openFailure = (cause: unknown): OpenFailure => ({
  code: typeof cause === "object" && cause !== null && "code" in cause && typeof cause.code === "string"
    ? cause.code
    : undefined,
  message: cause instanceof Error ? cause.message : String(cause)
})

/** The longest wait between connection attempts. */
const maxReconnectDelay = Duration.seconds(1)

/**
 * The waits between failed connections in a row: 50 ms doubling, at most 1 s, jittered (0.8 to
 * 1.2 times) so that clients of a restarted server do not all come back at the same moment.
 */
export const reconnectSchedule: Schedule.Schedule<Duration.Duration> = Schedule.exponential(Duration.millis(50)).pipe(
  Schedule.jittered,
  Schedule.modifyDelay((_, delay) => Duration.min(delay, maxReconnectDelay))
)

/**
 * The protocol, and `connect`, which opens the first connection (fails with why it could not).
 * Everything it holds is released with the scope.
 */
export const make = (
  options: ClientProtocolOptions
): Effect.Effect<
  { readonly protocol: RpcClient.Protocol["Type"]; readonly connect: Effect.Effect<void, OpenFailure> },
  never,
  Scope.Scope
> =>
  Effect.gen(function*() {
    const { socketPath } = options
    const clock = yield* Effect.clock
    const reconnectMillis = Duration.toMillis(options.reconnectTimeout)
    /** What the server said (or what this side made up), in order, for the RPC client. */
    const responses = yield* Queue.unbounded<FromServerEncoded>()
    /** Set when a call waits for a connection, or one is installed. */
    const wake = yield* Queue.sliding<void>(1)
    /** Calls waiting for a connection, in the order they were made: their line and deadline. */
    const waiting = new Map<string, { readonly line: string; readonly deadline: number }>()
    let live: Live | undefined
    let closed = false
    /** Why the last connection ended or could not be opened: what a call that waited too long fails with. */
    let lastFailure: RpcLayerError = new ConnectionFailed({ socketPath, reason: "not connected" })

    const respond = (message: FromServerEncoded) => void Queue.unsafeOffer(responses, message)

    const wait = (requestId: string, line: string, deadline = clock.unsafeCurrentTimeMillis() + reconnectMillis) => {
      waiting.set(requestId, { line, deadline })
      Queue.unsafeOffer(wake, undefined)
    }

    const write = (connection: Live, requestId: string, line: string, deadline?: number) => {
      connection.sent.set(requestId, { line, deadline })
      connection.socket.write(line)
    }

    /**
     * Ends `connection`: answered calls fail, unanswered ones wait for the next connection. A call
     * keeps its deadline across connections that answered nothing (a server that keeps closing
     * them cannot make it wait for ever); one that answered something restarts it.
     */
    const lose = (connection: Live, why: RpcLayerError) => {
      if (live !== connection) return
      live = undefined
      connection.socket.destroy()
      lastFailure = why
      const reason = why._tag === "ConnectionFailed" ? why.reason : why.message
      for (const [requestId, sent] of connection.sent) {
        if (sent.line === undefined) {
          respond(failureExit(
            requestId,
            new ConnectionFailed({ socketPath, reason: `${reason} (after part of the answer; it is not repeated)` })
          ))
        } else {
          wait(requestId, sent.line, connection.answered ? undefined : sent.deadline)
        }
      }
      connection.sent.clear()
      Deferred.unsafeDone(connection.lost, Effect.succeed(why))
    }

    const onMessage = (connection: Live, message: FromServerEncoded) => {
      switch (message._tag) {
        case "Pong":
          connection.pongDue = false
          return
        case "Chunk":
        case "Exit": {
          const sent = connection.sent.get(message.requestId)
          if (sent !== undefined) {
            connection.answered = true
            if (message._tag === "Exit") connection.sent.delete(message.requestId)
            else sent.line = undefined
          }
          return respond(message)
        }
        case "Defect": {
          const notice = decodeNotice(message.defect)
          if (Either.isRight(notice)) return lose(connection, notice.right)
          // Any other defect ends every call of the RPC client.
          connection.sent.clear()
          return respond(message)
        }
        default:
          return respond(message)
      }
    }

    const install = (socket: Net.Socket): Live => {
      const connection: Live = { socket, sent: new Map(), pongDue: false, answered: false, lost: Deferred.unsafeMake(FiberId.none) }
      live = connection
      Queue.unsafeOffer(wake, undefined)
      let partial = ""
      socket.setEncoding("utf8")
      socket.on("data", (data: string) => {
        let start = 0
        let nl = data.indexOf("\n")
        while (nl !== -1) {
          const line = partial + data.slice(start, nl)
          partial = ""
          start = nl + 1
          nl = data.indexOf("\n", start)
          let message: FromServerEncoded
          try {
            message = JSON.parse(line)
          } catch {
            return lose(connection, new ConnectionFailed({ socketPath, reason: "the server sent a message that is not JSON" }))
          }
          onMessage(connection, message)
          if (live !== connection) return
        }
        partial += data.slice(start)
      })
      socket.on("error", (cause) => lose(connection, new ConnectionFailed({ socketPath, reason: cause.message })))
      socket.on("close", () => lose(connection, new ConnectionFailed({ socketPath, reason: "the server closed the connection" })))
      for (const [requestId, { deadline, line }] of waiting) write(connection, requestId, line, deadline)
      waiting.clear()
      if (socket.destroyed) lose(connection, new ConnectionFailed({ socketPath, reason: "the connection closed as it opened" }))
      return connection
    }

    const open = Effect.async<Net.Socket, OpenFailure>((resume) => {
      const socket = Net.createConnection({ path: socketPath })
      const onError = (cause: Error) => {
        socket.destroy()
        resume(Effect.fail(openFailure(cause)))
      }
      socket.once("error", onError)
      socket.once("connect", () => {
        socket.off("error", onError)
        // Until `install` listens: an error in between must not go unhandled (install sees the socket destroyed).
        socket.on("error", () => {})
        resume(Effect.succeed(socket))
      })
      return Effect.sync(() => void socket.destroy())
    })

    /** Fails the waiting calls whose deadline has passed. */
    const expire = (): void => {
      const now = clock.unsafeCurrentTimeMillis()
      for (const [requestId, { deadline }] of waiting) {
        if (deadline > now) continue
        waiting.delete(requestId)
        respond(failureExit(
          requestId,
          lastFailure._tag === "ConnectionFailed"
            ? new ConnectionFailed({
              socketPath,
              reason: `not connected within ${Duration.format(options.reconnectTimeout)}: ${lastFailure.reason}`
            })
            : lastFailure
        ))
      }
    }

    /** How long until the earliest waiting call gives up: no retry waits longer than that. */
    const untilEarliestDeadline = (): Duration.Duration => {
      let earliest = Infinity
      for (const { deadline } of waiting.values()) earliest = Math.min(earliest, deadline)
      return Duration.millis(Math.max(0, earliest - clock.unsafeCurrentTimeMillis()))
    }

    /** Until a connection is live or a call waits for one; calls past their deadline fail meanwhile. */
    const needed: Effect.Effect<void> = Effect.suspend(() => {
      expire()
      return live !== undefined || (waiting.size > 0 && !closed) ? Effect.void : Effect.zipRight(Queue.take(wake), needed)
    })

    /**
     * One connection's life: the live one, or one opened when a call needs it, until it is lost.
     * Fails when it cannot be opened, or is lost before the server answered anything on it.
     */
    const session: Effect.Effect<void, RpcLayerError> = Effect.gen(function*() {
      yield* needed
      let current = live
      if (current === undefined) {
        const socket = yield* Effect.mapError(
          open,
          (failure) => lastFailure = new ConnectionFailed({ socketPath, reason: connectReason(failure) })
        )
        if (closed) return socket.destroy()
        current = install(socket)
      }
      const why = yield* Deferred.await(current.lost)
      if (!current.answered) return yield* Effect.fail(why)
    })

    yield* session.pipe(
      Effect.retry(reconnectSchedule.pipe(Schedule.modifyDelay((_, delay) => Duration.min(delay, untilEarliestDeadline())))),
      Effect.forever,
      Effect.interruptible,
      Effect.forkScoped
    )

    yield* Effect.sync(() => {
      const connection = live
      if (connection === undefined) return
      if (connection.pongDue) {
        return lose(
          connection,
          new ConnectionFailed({ socketPath, reason: `no answer to a ping within ${Duration.format(options.pingInterval)}` })
        )
      }
      connection.pongDue = true
      connection.socket.write(pingLine)
    }).pipe(Effect.delay(options.pingInterval), Effect.forever, Effect.interruptible, Effect.forkScoped)

    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        closed = true
        const connection = live
        live = undefined
        connection?.socket.destroy()
      })
    )

    const connect = Effect.flatMap(open, (socket) => Effect.sync(() => void install(socket)))

    const protocol = yield* RpcClient.Protocol.make((writeResponse) =>
      Effect.as(
        Effect.forkScoped(Effect.forever(Effect.flatMap(Queue.take(responses), writeResponse)).pipe(Effect.interruptible)),
        {
          send: (message) =>
            Effect.sync(() => {
              switch (message._tag) {
                case "Request": {
                  const line = JSON.stringify(message) + "\n"
                  if (live !== undefined && waiting.size === 0) write(live, message.id, line)
                  else wait(message.id, line)
                  return
                }
                case "Ack":
                  if (live?.sent.has(message.requestId)) live.socket.write(JSON.stringify(message) + "\n")
                  return
                case "Interrupt":
                  waiting.delete(message.requestId)
                  if (live?.sent.delete(message.requestId)) live.socket.write(JSON.stringify(message) + "\n")
                  return
                case "Ping":
                case "Eof":
                  live?.socket.write(JSON.stringify(message) + "\n")
                  return
              }
            }),
          supportsAck: true,
          supportsTransferables: false
        }
      )
    )
    return { protocol, connect }
  })

/** A connection failure in words. */
export const connectReason = (failure: OpenFailure): string => {
  switch (failure.code) {
    case "ENOENT":
      return "there is no socket (is the server running?)"
    case "ECONNREFUSED":
      return "nothing listens on the socket (the server is not running)"
    case "EACCES":
      return "permission denied"
    case "EAGAIN":
      return "the server's queue of new connections is full"
    default:
      return failure.message
  }
}
