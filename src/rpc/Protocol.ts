/**
 * The server side of the wire: newline-delimited JSON on each accepted socket (what the client's
 * `RpcSerialization.layerNdjson` speaks), as an `RpcServer.Protocol` over a `SocketServer`. It is
 * the stock socket protocol (`RpcServer.layerProtocolSocketServer`) plus what that one lacks:
 *
 * - **Message size.** A frame is refused once it exceeds `maxMessageBytes`, before it is buffered
 *   further: the rest of it is discarded unread. When its head names a request (id and tag), that
 *   request fails with `MessageTooLarge` and the connection stays usable; otherwise the client gets
 *   a defect and the connection is closed.
 * - **Malformed messages** (not JSON, not an RPC envelope, an unknown tag): the frame is dropped
 *   and answered (per request where it names one, else with a defect); the connection and every
 *   other request carry on. The server never sees a message that is not a valid envelope.
 * - **Connections.** At most `maxConnections` are admitted. Further ones wait: each of their
 *   requests fails with `TooManyConnections` while the server is full, and is served as soon as a
 *   slot is free. Beyond `maxConnections` waiting connections more are closed at once.
 * - **In-flight requests** per connection (from the request to its exit, streams included): one
 *   over `maxInFlightPerConnection` fails with `TooManyRequests`.
 * - A connection that closes disconnects its client in the server: its requests are interrupted.
 * - Responses are written without waiting for the client to read them: streams are paced by the
 *   client's acks, and a connection with more than 16 MiB of unread responses is closed.
 */
import * as NodeSocket from "@effect/platform-node/NodeSocket"
import type * as Socket from "@effect/platform/Socket"
import * as SocketServer from "@effect/platform/SocketServer"
import type * as Rpc from "@effect/rpc/Rpc"
import type * as RpcGroup from "@effect/rpc/RpcGroup"
import type { FromClientEncoded, FromServerEncoded, RequestEncoded } from "@effect/rpc/RpcMessage"
import * as RpcServer from "@effect/rpc/RpcServer"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Mailbox from "effect/Mailbox"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import { MessageTooLarge, RpcLimitError, TooManyConnections, TooManyRequests } from "./RpcError.js"

export interface Limits {
  /** Largest inbound message (one JSON line, without its newline) in bytes. */
  readonly maxMessageBytes: number
  /** Connections served at once. */
  readonly maxConnections: number
  /** Requests in flight on one connection. */
  readonly maxInFlightPerConnection: number
}

/** The limits out of a larger options object. */
export const limitsOf = (options: Limits): Limits => ({
  maxMessageBytes: options.maxMessageBytes,
  maxConnections: options.maxConnections,
  maxInFlightPerConnection: options.maxInFlightPerConnection
})

// ---------------------------------------------------------------------------------------------
// Framing
// ---------------------------------------------------------------------------------------------

/** Responses buffered for a client that does not read them, before its connection is closed. */
const maxBufferedBytes = 16 * 1024 * 1024

/** Bytes of an oversized frame kept to find its request id and tag. */
const headBytes = 512
const newline = 0x0a

/**
 * Splits a byte stream into newline-terminated frames, never holding more than `max` bytes of
 * one: a longer frame is reported once (with its first bytes) and the rest of it skipped.
 */
export class Framer {
  private parts: Array<Uint8Array> = []
  private size = 0
  private discarding = false

  constructor(private readonly max: number) {}

  push(
    chunk: Uint8Array,
    onFrame: (frame: Buffer) => void,
    onOversized: (head: Buffer, size: number) => void
  ): void {
    let start = 0
    for (;;) {
      const nl = chunk.indexOf(newline, start)
      const piece = chunk.subarray(start, nl === -1 ? chunk.length : nl)
      if (!this.discarding && piece.length > 0) {
        if (this.size + piece.length > this.max) {
          const parts = [...this.parts, piece]
          const head = Buffer.concat(parts.map((p) => p.subarray(0, headBytes))).subarray(0, headBytes)
          const size = this.size + piece.length
          this.parts = []
          this.size = 0
          this.discarding = true
          onOversized(head, size)
        } else {
          this.parts.push(piece)
          this.size += piece.length
        }
      }
      if (nl === -1) return
      if (!this.discarding && this.size > 0) onFrame(Buffer.concat(this.parts, this.size))
      this.parts = []
      this.size = 0
      this.discarding = false
      start = nl + 1
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Envelopes
// ---------------------------------------------------------------------------------------------

const RequestId = Schema.String.pipe(Schema.pattern(/^[0-9]{1,20}$/, { identifier: "RequestId" }))

const Incoming = Schema.Union(
  Schema.Struct({
    _tag: Schema.Literal("Request"),
    id: RequestId,
    tag: Schema.String,
    payload: Schema.optionalWith(Schema.Unknown, { default: () => ({}) }),
    headers: Schema.optionalWith(Schema.Array(Schema.Tuple(Schema.String, Schema.String)), { default: () => [] }),
    traceId: Schema.optional(Schema.String),
    spanId: Schema.optional(Schema.String),
    sampled: Schema.optional(Schema.Boolean)
  }),
  Schema.Struct({ _tag: Schema.Literal("Ack", "Interrupt"), requestId: RequestId }),
  Schema.Struct({ _tag: Schema.Literal("Ping", "Eof") })
)
type Incoming = typeof Incoming.Type

const decodeIncoming = Schema.decodeUnknownEither(Incoming)
const encodeLimitError = Schema.encodeSync(RpcLimitError)
const encodeDefect = Schema.encodeSync(Schema.Defect)

/** `{"_tag":"Request","id":"<digits>","tag":"<name>"` at the start of a frame, as the Effect client writes it. */
const requestHead = /^\s*\{\s*"_tag"\s*:\s*"Request"\s*,\s*"id"\s*:\s*"([0-9]{1,20})"\s*,\s*"tag"\s*:\s*"([A-Za-z0-9_]{1,64})"/

const failureExit = (requestId: string, error: RpcLimitError): FromServerEncoded => ({
  _tag: "Exit",
  requestId,
  exit: { _tag: "Failure", cause: { _tag: "Fail", error: encodeLimitError(error) } }
})

const dieExit = (requestId: string, defect: string): FromServerEncoded => ({
  _tag: "Exit",
  requestId,
  exit: { _tag: "Failure", cause: { _tag: "Die", defect: encodeDefect(defect) } }
})

const defectMessage = (defect: string): FromServerEncoded => ({ _tag: "Defect", defect: encodeDefect(defect) })

const toEncoded = (message: Incoming): FromClientEncoded => {
  switch (message._tag) {
    case "Request": {
      const request: RequestEncoded = {
        _tag: "Request",
        id: message.id,
        tag: message.tag,
        payload: message.payload,
        headers: message.headers.map(([k, v]): [string, string] => [k, v]),
        ...(message.traceId === undefined ? {} : { traceId: message.traceId }),
        ...(message.spanId === undefined ? {} : { spanId: message.spanId }),
        ...(message.sampled === undefined ? {} : { sampled: message.sampled })
      }
      return request
    }
    case "Ack":
    case "Interrupt":
      return { _tag: message._tag, requestId: message.requestId }
    case "Ping":
    case "Eof":
      return { _tag: message._tag }
  }
}

// ---------------------------------------------------------------------------------------------
// The protocol
// ---------------------------------------------------------------------------------------------

interface Connection {
  readonly id: number
  admitted: boolean
  readonly inFlight: Set<string>
  readonly write: (message: FromServerEncoded) => Effect.Effect<void>
  readonly close: Effect.Effect<void>
}

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
    const disconnects = yield* Mailbox.make<number>()
    const connections = new Map<number, Connection>()
    const clientIds = new Set<number>()
    let nextId = 0
    let admitted = 0
    let waiting = 0
    let writeRequest!: (clientId: number, message: FromClientEncoded) => Effect.Effect<void>

    const admit = (connection: Connection): boolean => {
      if (connection.admitted) return true
      if (admitted >= limits.maxConnections) return false
      connection.admitted = true
      admitted++
      waiting--
      return true
    }

    const onFrame = (connection: Connection, frame: Buffer): Effect.Effect<void> => {
      let json: unknown
      try {
        json = JSON.parse(frame.toString("utf8"))
      } catch (cause) {
        return connection.write(defectMessage(`malformed message: ${cause instanceof Error ? cause.message : String(cause)}`))
      }
      const decoded = decodeIncoming(json)
      if (Either.isLeft(decoded)) {
        const id = typeof json === "object" && json !== null && "id" in json && typeof json.id === "string" &&
            /^[0-9]{1,20}$/.test(json.id)
          ? json.id
          : undefined
        const reason = `malformed message: ${ParseResult.TreeFormatter.formatErrorSync(decoded.left)}`
        return connection.write(id === undefined ? defectMessage(reason) : dieExit(id, reason))
      }
      const message = decoded.right
      switch (message._tag) {
        case "Request": {
          if (!group.requests.has(message.tag)) {
            return connection.write(dieExit(message.id, `unknown request tag ${JSON.stringify(message.tag.slice(0, 64))}`))
          }
          if (!admit(connection)) {
            return connection.write(failureExit(message.id, new TooManyConnections({ limit: limits.maxConnections })))
          }
          if (connection.inFlight.has(message.id)) {
            return connection.write(defectMessage(`request id ${message.id} is already in flight`))
          }
          if (connection.inFlight.size >= limits.maxInFlightPerConnection) {
            return connection.write(failureExit(message.id, new TooManyRequests({ limit: limits.maxInFlightPerConnection })))
          }
          connection.inFlight.add(message.id)
          return writeRequest(connection.id, toEncoded(message))
        }
        case "Ping":
          return connection.write({ _tag: "Pong" })
        case "Ack":
        case "Interrupt":
        case "Eof":
          return connection.admitted ? writeRequest(connection.id, toEncoded(message)) : Effect.void
      }
    }

    const onOversized = (connection: Connection, head: Buffer, size: number): Effect.Effect<void> => {
      const error = new MessageTooLarge({ limit: limits.maxMessageBytes, size })
      const match = requestHead.exec(head.toString("latin1"))
      if (match !== null) return connection.write(failureExit(match[1]!, error))
      return Effect.zipRight(connection.write(defectMessage(error.message)), connection.close)
    }

    const onSocket = (socket: Socket.Socket) =>
      Effect.gen(function*() {
        const id = nextId++
        const writeRaw = yield* socket.writer
        const net = yield* Effect.serviceOption(NodeSocket.NetSocket)
        const closing = yield* Deferred.make<void>()
        const write = (message: FromServerEncoded): Effect.Effect<void> => {
          let line: string
          try {
            line = JSON.stringify(message) + "\n"
          } catch (cause) {
            line = JSON.stringify(defectMessage(`cannot encode a response: ${String(cause)}`)) + "\n"
          }
          if (Option.isNone(net)) return Effect.catchAll(writeRaw(line), () => Effect.void)
          // Never waits for the client to read (a stuck write would hold up shutdown, which cannot
          // interrupt a request's final write); streams are paced by the client's acks instead,
          // and a client that lets too much pile up is cut off.
          const conn = net.value
          return Effect.suspend(() => {
            if (conn.destroyed || conn.writableEnded) return Effect.void
            conn.write(line)
            if (conn.writableLength <= maxBufferedBytes) return Effect.void
            conn.destroy()
            return Effect.logWarning("rpc: closed a connection that does not read its responses").pipe(
              Effect.annotateLogs({ service: "RpcServer", connection: id, bufferedBytes: conn.writableLength })
            )
          })
        }
        // Ends the connection gracefully: what was written is delivered, then the socket is closed.
        const close = Deferred.succeed(closing, undefined)
        const connection: Connection = { id, admitted: false, inFlight: new Set(), write, close }
        const run = (onData: (data: string | Uint8Array) => Effect.Effect<void> | void, onOpen?: Effect.Effect<void>) =>
          socket.runRaw(onData, onOpen === undefined ? undefined : { onOpen }).pipe(
            Effect.raceFirst(Deferred.await(closing)),
            Effect.interruptible,
            // A client that goes away (closes, resets) is not the server's failure.
            Effect.catchAll((error) => Effect.logDebug("rpc: connection ended", error.message)),
            Effect.annotateLogs({ service: "RpcServer", connection: id })
          )
        if (admitted < limits.maxConnections) {
          connection.admitted = true
          admitted++
        } else if (waiting < limits.maxConnections) {
          waiting++
        } else {
          const refusal = new TooManyConnections({ limit: limits.maxConnections })
          return yield* run(
            () => undefined,
            Effect.zipRight(write(defectMessage(`${refusal.message}, and as many connections wait: closing`)), close)
          )
        }
        connections.set(id, connection)
        clientIds.add(id)
        yield* Effect.addFinalizer(() =>
          Effect.suspend(() => {
            connections.delete(id)
            clientIds.delete(id)
            if (connection.admitted) admitted--
            else waiting--
            return disconnects.offer(id)
          })
        )
        const framer = new Framer(limits.maxMessageBytes)
        yield* run((data) => {
          const actions: Array<Effect.Effect<void>> = []
          framer.push(
            typeof data === "string" ? Buffer.from(data, "utf8") : data,
            (frame) => actions.push(onFrame(connection, frame)),
            (head, size) => actions.push(onOversized(connection, head, size))
          )
          if (actions.length === 0) return
          return actions.length === 1 ? actions[0] : Effect.forEach(actions, (a) => a, { discard: true })
        })
      }).pipe(Effect.scoped)

    yield* server.run(onSocket).pipe(Effect.interruptible, Effect.forkScoped)

    return yield* RpcServer.Protocol.make((writeRequest_) => {
      writeRequest = writeRequest_
      return Effect.succeed({
        disconnects,
        send: (clientId: number, response: FromServerEncoded) => {
          const connection = connections.get(clientId)
          if (connection === undefined) return Effect.void
          if (response._tag === "Exit") connection.inFlight.delete(response.requestId)
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
