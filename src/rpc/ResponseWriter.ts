/**
 * How the server writes to one connection: each message as a JSON line, never waiting for the
 * client to read it (a stuck write would hold up shutdown, which cannot interrupt a request's final
 * write). Streams are paced by the client's acks instead, and a connection with more than
 * `maxBufferedBytes` of unread responses is destroyed.
 */
import * as NodeSocket from "@effect/platform-node/NodeSocket"
import type * as Socket from "@effect/platform/Socket"
import type { FromServerEncoded } from "@effect/rpc/RpcMessage"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import { defectMessage } from "./Envelope.js"

/** Responses buffered for a client that does not read them, before its connection is closed. */
export const maxBufferedBytes = 2 * 1024 * 1024

/** The writer of `socket` (the server's connection `connectionId`, for the logs). */
export const make = (
  socket: Socket.Socket,
  connectionId: number
): Effect.Effect<(message: FromServerEncoded) => Effect.Effect<void>, never, Scope.Scope> =>
  Effect.gen(function*() {
    const writeRaw = yield* socket.writer
    const net = yield* Effect.serviceOption(NodeSocket.NetSocket)
    return (message) => {
      let line: string
      try {
        line = JSON.stringify(message) + "\n"
      } catch (cause) {
        line = JSON.stringify(defectMessage(`cannot encode a response: ${String(cause)}`)) + "\n"
      }
      if (Option.isNone(net)) return Effect.catchAll(writeRaw(line), () => Effect.void)
      const conn = net.value
      return Effect.suspend(() => {
        if (conn.destroyed || conn.writableEnded) return Effect.void
        if (conn.writableLength <= maxBufferedBytes) {
          conn.write(line)
          return Effect.void
        }
        const bufferedBytes = conn.writableLength
        conn.destroy()
        return Effect.logWarning("rpc: closed a connection that does not read its responses").pipe(
          Effect.annotateLogs({ service: "RpcServer", connection: connectionId, bufferedBytes })
        )
      })
    }
  })
