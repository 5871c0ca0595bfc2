/**
 * The server's envelopes: what a client may send (validated with a Schema before the RPC server
 * sees it, so a malformed message never reaches it), and the messages the protocol writes on its
 * own: a request's failure or defect, a connection-wide defect, and the notice naming the limit
 * for which a connection is closed.
 */
import type { FromClientEncoded, FromServerEncoded, RequestEncoded } from "@effect/rpc/RpcMessage"
import * as Schema from "effect/Schema"
import { RpcLimitError } from "./RpcError.js"

const RequestId = Schema.String.pipe(Schema.pattern(/^[0-9]{1,20}$/, { identifier: "RequestId" }))

/** A message from a client: a request, an ack or interrupt of one, a ping or the end of its input. */
export const Incoming = Schema.Union(
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
export type Incoming = typeof Incoming.Type
export type IncomingRequest = Extract<Incoming, { _tag: "Request" }>

export const decodeIncoming = Schema.decodeUnknownEither(Incoming)
const encodeLimitError = Schema.encodeSync(RpcLimitError)
const encodeDefect = Schema.encodeSync(Schema.Defect)

/** `{"_tag":"Request","id":"<digits>","tag":"<name>"` at the start of a frame, as the Effect client writes it. */
const requestHead = /^\s*\{\s*"_tag"\s*:\s*"Request"\s*,\s*"id"\s*:\s*"([0-9]{1,20})"\s*,\s*"tag"\s*:\s*"([A-Za-z0-9_]{1,64})"/

/** The request id named by the head of a frame that was not parsed, if it names one. */
export const requestIdOfHead = (head: Buffer): string | undefined => requestHead.exec(head.toString("latin1"))?.[1]

/** The request id of a JSON value that failed to decode as an envelope, if it has a valid one. */
export const requestIdOf = (json: unknown): string | undefined =>
  typeof json === "object" && json !== null && "id" in json && typeof json.id === "string" && /^[0-9]{1,20}$/.test(json.id)
    ? json.id
    : undefined

export const failureExit = (requestId: string, error: RpcLimitError): FromServerEncoded => ({
  _tag: "Exit",
  requestId,
  exit: { _tag: "Failure", cause: { _tag: "Fail", error: encodeLimitError(error) } }
})

export const dieExit = (requestId: string, defect: string): FromServerEncoded => ({
  _tag: "Exit",
  requestId,
  exit: { _tag: "Failure", cause: { _tag: "Die", defect: encodeDefect(defect) } }
})

export const defectMessage = (defect: string): FromServerEncoded => ({ _tag: "Defect", defect: encodeDefect(defect) })

/** What the server writes before it closes a connection for a limit: a defect that is the limit error. */
export const noticeOf = (error: RpcLimitError): FromServerEncoded => ({ _tag: "Defect", defect: encodeLimitError(error) })

/** A validated message as the RPC server takes it. */
export const toEncoded = (message: Incoming): FromClientEncoded => {
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
