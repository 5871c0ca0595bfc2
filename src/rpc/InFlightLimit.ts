/**
 * The cap on requests in flight per connection, as an `RpcMiddleware` keyed by the server's
 * `clientId` (one per connection). It wraps the whole handler: for a stream RPC the handler is the
 * run of the stream, so a request counts from the moment its fiber starts (in arrival order, before
 * its payload reaches a service) to its exit, streams included. One over `limit` fails with
 * `TooManyRequests` and nothing of it runs; the others on that connection, and every other
 * connection, are untouched.
 */
import * as RpcMiddleware from "@effect/rpc/RpcMiddleware"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { TooManyRequests } from "./RpcError.js"

export class InFlightLimit extends RpcMiddleware.Tag<InFlightLimit>()("nativegen/rpc/InFlightLimit", {
  wrap: true,
  failure: TooManyRequests
}) {}

/** The middleware for at most `limit` requests in flight on one connection. */
export const make = (limit: number): InFlightLimit["Type"] => {
  /** Requests in flight per connection; a connection with none has no entry. */
  const inFlight = new Map<number, number>()
  const release = (clientId: number) =>
    Effect.sync(() => {
      const count = (inFlight.get(clientId) ?? 1) - 1
      if (count <= 0) inFlight.delete(clientId)
      else inFlight.set(clientId, count)
    })
  // Counted and released under one mask: an interruption cannot fall between the two.
  return ({ clientId, next }) =>
    Effect.uninterruptibleMask((restore) =>
      Effect.suspend(() => {
        const count = inFlight.get(clientId) ?? 0
        if (count >= limit) return Effect.fail(new TooManyRequests({ limit }))
        inFlight.set(clientId, count + 1)
        return Effect.ensuring(restore(next), release(clientId))
      })
    )
}

/** The middleware, for a server whose connections each have at most `limit` requests in flight. */
export const layer = (limit: number): Layer.Layer<InFlightLimit> => Layer.sync(InFlightLimit, () => make(limit))
