/**
 * The server side of the wire: newline-delimited JSON on each accepted socket (what the client
 * speaks), as an `RpcServer.Protocol` over a `SocketServer`. It is the stock socket protocol
 * (`RpcServer.layerProtocolSocketServer`) plus what that one lacks (frames: `Framing`; envelopes
 * and the messages it writes itself: `Envelope`; writes: `ResponseWriter`; the in-flight cap per
 * connection is the `InFlightLimit` middleware, not part of the protocol):
 *
 * - **Message size and depth.** A frame is refused once it exceeds `maxMessageBytes`, before it is
 *   buffered further: the rest of it is discarded unread. A frame that nests arrays and objects
 *   deeper than `maxNestingDepth` is refused before it is parsed. When its head names a request
 *   (id and tag), that request fails with `MessageTooLarge`/`MessageTooDeep` and the connection
 *   stays usable; otherwise the connection is closed with a notice naming the limit.
 * - **Malformed messages** (not JSON, not an RPC envelope, an unknown tag): the frame is dropped
 *   and answered (per request where it names one, else with a defect); the connection and every
 *   other request carry on. The server never sees a message that is not a valid envelope.
 * - **Connections.** A connection is *pending* until its first request: at most
 *   `maxPendingConnections` are (a newer one closes the oldest), each for at most
 *   `firstMessageTimeout`. Its first request *admits* it: at most `maxConnections` are admitted.
 *   When all are, the one idle longest (no request in flight) is closed to make room; when none is
 *   idle, the request fails with `TooManyConnections` and the connection is closed. An admitted
 *   connection with no request in flight for `idleTimeout` is closed. Pings are answered until a
 *   connection is closing, and count for nothing.
 * - **Closing notices.** Before the server closes a connection for a limit it writes a notice: a
 *   `Defect` message whose defect is the encoded limit error (`TooManyPendingConnections`,
 *   `FirstMessageTimeout`, `IdleTimeout`, `TooManyConnections`, ...). A connection closed for a
 *   limit runs no request it had not read by then: the client may send those again elsewhere.
 * - **Streams** are paced by the client's acks (one chunk outstanding per stream); a stream whose
 *   client takes no chunk for `ackTimeout` is cancelled and fails with `AckTimeout`, so a client
 *   that stops reading cannot hold a generation (and its engine slot) forever.
 * - A connection that closes disconnects its client in the server: its requests are interrupted.
 * - Responses are written without waiting for the client to read them; a connection with more
 *   than `ResponseWriter.maxBufferedBytes` (2 MiB) of unread responses is closed.
 *
 * Every timer is one sweeper fiber on the Effect clock that wakes at the earliest deadline.
 */
import type * as Socket from "@effect/platform/Socket"
import * as SocketServer from "@effect/platform/SocketServer"
import type * as Rpc from "@effect/rpc/Rpc"
import type * as RpcGroup from "@effect/rpc/RpcGroup"
import type { FromClientEncoded, FromServerEncoded } from "@effect/rpc/RpcMessage"
import * as RpcServer from "@effect/rpc/RpcServer"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Mailbox from "effect/Mailbox"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import type * as Scope from "effect/Scope"
import {
  decodeIncoming,
  defectMessage,
  dieExit,
  failureExit,
  type IncomingRequest,
  noticeOf,
  requestIdOf,
  requestIdOfHead,
  toEncoded
} from "./Envelope.js"
import { Framer, headBytes, maxNestingDepth, nestsDeeperThan } from "./Framing.js"
import * as ResponseWriter from "./ResponseWriter.js"
import {
  AckTimeout,
  FirstMessageTimeout,
  IdleTimeout,
  MessageTooDeep,
  MessageTooLarge,
  type RpcLimitError,
  TooManyConnections,
  TooManyPendingConnections
} from "./RpcError.js"

export interface Limits {
  /** Largest inbound message (one JSON line, without its newline) in bytes. */
  readonly maxMessageBytes: number
  /** Connections served at once (those that sent a request). */
  readonly maxConnections: number
  /** Connections that have not sent their first request yet. */
  readonly maxPendingConnections: number
  /** How long a new connection may take to send its first request. */
  readonly firstMessageTimeout: Duration.Duration
  /** How long an admitted connection may stay without a request in flight. */
  readonly idleTimeout: Duration.Duration
  /** How long a stream waits for its client to take a chunk before it is cancelled. */
  readonly ackTimeout: Duration.Duration
}

/** The limits out of a larger options object. */
export const limitsOf = (options: Limits): Limits => ({
  maxMessageBytes: options.maxMessageBytes,
  maxConnections: options.maxConnections,
  maxPendingConnections: options.maxPendingConnections,
  firstMessageTimeout: options.firstMessageTimeout,
  idleTimeout: options.idleTimeout,
  ackTimeout: options.ackTimeout
})

interface Connection {
  readonly id: number
  /** `pending` until its first request, then `admitted`; `closing` once the server closes it. */
  phase: "pending" | "admitted" | "closing"
  readonly openedAt: number
  /** When it last received a request or finished its last one. */
  lastActive: number
  readonly inFlight: Set<string>
  /** Streams waiting for the client to ack a chunk: request id to since when. */
  readonly awaitingAck: Map<string, number>
  /** Streams cancelled for want of acks: their exit is replaced by `AckTimeout`. */
  readonly stalled: Set<string>
  /** While closing: the error every request still read gets, or none (they are left unanswered). */
  refusal: RpcLimitError | undefined
  readonly write: (message: FromServerEncoded) => Effect.Effect<void>
  readonly close: Effect.Effect<void>
}

const millis = (duration: Duration.Duration) => Math.max(1, Math.round(Duration.toMillis(duration)))

/**
 * The protocol over the `SocketServer` in context, serving `group` (used to answer unknown tags
 * per request). Accepting starts at once; messages wait until the RPC server runs.
 */
export const make = <Rpcs extends Rpc.Any>(
  group: RpcGroup.RpcGroup<Rpcs>,
  limits: Limits
): Effect.Effect<RpcServer.Protocol["Type"], never, SocketServer.SocketServer | Scope.Scope> =>
  Effect.gen(function*() {
    const server = yield* SocketServer.SocketServer
    const clock = yield* Effect.clock
    const disconnects = yield* Mailbox.make<number>()
    const connections = new Map<number, Connection>()
    const clientIds = new Set<number>()
    // Insertion-ordered: the oldest pending connection comes first.
    const pending = new Set<Connection>()
    const admitted = new Set<Connection>()
    const firstMessageMillis = millis(limits.firstMessageTimeout)
    const idleMillis = millis(limits.idleTimeout)
    const ackMillis = millis(limits.ackTimeout)
    let nextId = 0
    let writeRequest!: (clientId: number, message: FromClientEncoded) => Effect.Effect<void>

    const log = (message: string, connection: Connection, error: RpcLimitError) =>
      Effect.logDebug(message, error.message).pipe(Effect.annotateLogs({ service: "RpcServer", connection: connection.id }))

    /**
     * Marks `connection` closing at once (it no longer counts toward any limit) and returns what
     * finishes the job: the notice naming `notice`, then a graceful close. With `answer`, each
     * request still read before the close gets `notice` as its failure; without, none is run.
     */
    const beginClose = (connection: Connection, notice: RpcLimitError, answer: boolean): Effect.Effect<void> => {
      if (connection.phase === "closing") return Effect.void
      pending.delete(connection)
      admitted.delete(connection)
      connection.phase = "closing"
      connection.refusal = answer ? notice : undefined
      return Effect.zipRight(
        log("rpc: closing a connection", connection, notice),
        Effect.zipRight(connection.write(noticeOf(notice)), connection.close)
      )
    }

    /** The admitted connection idle the longest, if any has no request in flight. */
    const idlest = (): Connection | undefined => {
      let found: Connection | undefined
      for (const connection of admitted) {
        if (connection.inFlight.size === 0 && (found === undefined || connection.lastActive < found.lastActive)) {
          found = connection
        }
      }
      return found
    }

    /**
     * Admits a pending connection on its first request: what to do first (close an idle one to
     * make room), or undefined when every admitted connection is busy.
     */
    const admit = (connection: Connection): Effect.Effect<void> | undefined => {
      let makeRoom: Effect.Effect<void> = Effect.void
      if (admitted.size >= limits.maxConnections) {
        const victim = idlest()
        if (victim === undefined) return undefined
        makeRoom = beginClose(victim, new TooManyConnections({ limit: limits.maxConnections }), false)
      }
      pending.delete(connection)
      admitted.add(connection)
      connection.phase = "admitted"
      return makeRoom
    }

    /** Fails `requestId` with `error` when the head of its frame names it, else closes the connection. */
    const refuseFrame = (connection: Connection, head: Buffer, error: RpcLimitError): Effect.Effect<void> => {
      const requestId = requestIdOfHead(head)
      return requestId !== undefined ? connection.write(failureExit(requestId, error)) : beginClose(connection, error, false)
    }

    const onRequest = (connection: Connection, message: IncomingRequest): Effect.Effect<void> => {
      if (connection.phase === "closing") {
        return connection.refusal === undefined ? Effect.void : connection.write(failureExit(message.id, connection.refusal))
      }
      if (!group.requests.has(message.tag)) {
        return connection.write(dieExit(message.id, `unknown request tag ${JSON.stringify(message.tag.slice(0, 64))}`))
      }
      let first: Effect.Effect<void> = Effect.void
      if (connection.phase === "pending") {
        const admission = admit(connection)
        if (admission === undefined) {
          const refusal = new TooManyConnections({ limit: limits.maxConnections })
          return Effect.zipRight(connection.write(failureExit(message.id, refusal)), beginClose(connection, refusal, true))
        }
        first = admission
      }
      if (connection.inFlight.has(message.id)) {
        return Effect.zipRight(first, connection.write(defectMessage(`request id ${message.id} is already in flight`)))
      }
      connection.inFlight.add(message.id)
      connection.lastActive = clock.unsafeCurrentTimeMillis()
      return Effect.zipRight(first, writeRequest(connection.id, toEncoded(message)))
    }

    const onFrame = (connection: Connection, frame: Buffer): Effect.Effect<void> => {
      if (nestsDeeperThan(frame, maxNestingDepth)) {
        return refuseFrame(connection, frame.subarray(0, headBytes), new MessageTooDeep({ limit: maxNestingDepth }))
      }
      let json: unknown
      try {
        json = JSON.parse(frame.toString("utf8"))
      } catch (cause) {
        return connection.write(defectMessage(`malformed message: ${cause instanceof Error ? cause.message : String(cause)}`))
      }
      const decoded = decodeIncoming(json)
      if (Either.isLeft(decoded)) {
        const id = requestIdOf(json)
        const reason = `malformed message: ${ParseResult.TreeFormatter.formatErrorSync(decoded.left)}`
        return connection.write(id === undefined ? defectMessage(reason) : dieExit(id, reason))
      }
      const message = decoded.right
      switch (message._tag) {
        case "Request":
          return onRequest(connection, message)
        case "Ping":
          return connection.phase === "closing" ? Effect.void : connection.write({ _tag: "Pong" })
        case "Ack":
          if (connection.phase !== "admitted") return Effect.void
          connection.awaitingAck.delete(message.requestId)
          return writeRequest(connection.id, toEncoded(message))
        case "Interrupt":
        case "Eof":
          return connection.phase === "admitted" ? writeRequest(connection.id, toEncoded(message)) : Effect.void
      }
    }

    const onOversized = (connection: Connection, head: Buffer, size: number): Effect.Effect<void> =>
      refuseFrame(connection, head, new MessageTooLarge({ limit: limits.maxMessageBytes, size }))

    /** Cancels a stream whose client stopped taking chunks; its exit becomes `AckTimeout`. */
    const cancelStalled = (connection: Connection, requestId: string): Effect.Effect<void> => {
      connection.awaitingAck.delete(requestId)
      connection.stalled.add(requestId)
      return Effect.zipRight(
        log("rpc: cancelling a stream its client does not read", connection, new AckTimeout({ timeoutMillis: ackMillis })),
        writeRequest(connection.id, { _tag: "Interrupt", requestId })
      )
    }

    /**
     * Closes what is past its deadline (first message, idle, ack), then sleeps until the next
     * deadline. A deadline set while it sleeps is never earlier than its wake-up: each is at least
     * the shortest timeout after the moment it is set.
     */
    const sweep = Effect.suspend(() => {
      const now = clock.unsafeCurrentTimeMillis()
      let next = now + Math.min(firstMessageMillis, idleMillis, ackMillis)
      const due: Array<Effect.Effect<void>> = []
      for (const connection of pending) {
        const deadline = connection.openedAt + firstMessageMillis
        if (deadline <= now) due.push(beginClose(connection, new FirstMessageTimeout({ timeoutMillis: firstMessageMillis }), false))
        else next = Math.min(next, deadline)
      }
      for (const connection of admitted) {
        for (const [requestId, since] of connection.awaitingAck) {
          if (since + ackMillis <= now) due.push(cancelStalled(connection, requestId))
          else next = Math.min(next, since + ackMillis)
        }
        if (connection.inFlight.size > 0) continue
        const deadline = connection.lastActive + idleMillis
        if (deadline <= now) due.push(beginClose(connection, new IdleTimeout({ timeoutMillis: idleMillis }), false))
        else next = Math.min(next, deadline)
      }
      return Effect.zipRight(
        Effect.forEach(due, (effect) => effect, { discard: true }),
        Effect.sleep(Duration.millis(next - now))
      )
    }).pipe(Effect.catchAllCause(Effect.logError), Effect.forever)

    const onSocket = (socket: Socket.Socket) =>
      Effect.gen(function*() {
        const id = nextId++
        const write = yield* ResponseWriter.make(socket, id)
        const closing = yield* Deferred.make<void>()
        const now = clock.unsafeCurrentTimeMillis()
        const connection: Connection = {
          id,
          phase: "pending",
          openedAt: now,
          lastActive: now,
          inFlight: new Set(),
          awaitingAck: new Map(),
          stalled: new Set(),
          refusal: undefined,
          write,
          // Ends the connection gracefully: what was written is delivered, then the socket is closed.
          close: Deferred.succeed(closing, undefined)
        }
        connections.set(id, connection)
        clientIds.add(id)
        pending.add(connection)
        yield* Effect.addFinalizer(() =>
          Effect.suspend(() => {
            connections.delete(id)
            clientIds.delete(id)
            pending.delete(connection)
            admitted.delete(connection)
            return disconnects.offer(id)
          })
        )
        if (pending.size > limits.maxPendingConnections) {
          const oldest = pending.values().next().value
          if (oldest !== undefined) {
            yield* beginClose(oldest, new TooManyPendingConnections({ limit: limits.maxPendingConnections }), false)
          }
        }
        const framer = new Framer(limits.maxMessageBytes)
        yield* socket.runRaw((data) => {
          const actions: Array<Effect.Effect<void>> = []
          framer.push(
            typeof data === "string" ? Buffer.from(data, "utf8") : data,
            (frame) => actions.push(onFrame(connection, frame)),
            (head, size) => actions.push(onOversized(connection, head, size))
          )
          if (actions.length === 0) return
          return actions.length === 1 ? actions[0] : Effect.forEach(actions, (a) => a, { discard: true })
        }).pipe(
          Effect.raceFirst(Deferred.await(closing)),
          Effect.interruptible,
          // A client that goes away (closes, resets) is not the server's failure.
          Effect.catchAll((error) => Effect.logDebug("rpc: connection ended", error.message)),
          Effect.annotateLogs({ service: "RpcServer", connection: id })
        )
      }).pipe(Effect.scoped)

    yield* server.run(onSocket).pipe(Effect.interruptible, Effect.forkScoped)
    yield* sweep.pipe(Effect.interruptible, Effect.forkScoped)

    return yield* RpcServer.Protocol.make((writeRequest_) => {
      writeRequest = writeRequest_
      return Effect.succeed({
        disconnects,
        send: (clientId: number, response: FromServerEncoded) => {
          const connection = connections.get(clientId)
          if (connection === undefined) return Effect.void
          if (response._tag === "Chunk") {
            connection.awaitingAck.set(response.requestId, clock.unsafeCurrentTimeMillis())
          } else if (response._tag === "Exit") {
            connection.inFlight.delete(response.requestId)
            connection.awaitingAck.delete(response.requestId)
            if (connection.inFlight.size === 0) connection.lastActive = clock.unsafeCurrentTimeMillis()
            if (connection.stalled.delete(response.requestId)) {
              return connection.write(failureExit(response.requestId, new AckTimeout({ timeoutMillis: ackMillis })))
            }
          }
          return connection.write(response)
        },
        end: () => Effect.void,
        clientIds: Effect.sync(() => clientIds),
        initialMessage: Effect.succeed(Option.none()),
        supportsAck: true,
        supportsTransferables: false,
        supportsSpanPropagation: true
      })
    })
  })
