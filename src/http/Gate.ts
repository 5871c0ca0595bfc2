/**
 * What every request passes before its route (the server's global middleware, which also spans
 * the sending of a streamed body): its origin (a browser's request from another site's page is
 * refused with 403: without it, any web page could make a visitor's browser post to a local
 * server that has no key, as Ollama also guards against), the API key (401 with `WWW-Authenticate: Bearer`), the declared
 * body size (413), and a place among the requests in flight (429 with Retry-After), each refusal
 * in the shape of the API the path belongs to. Bodies sent without a length are held to the same
 * limit while they are read (`MaxBodySize`, and JsonBody's own count). `GET /health` needs no key
 * and no place: it does no work, and a monitor must see the engine's state under any load. Nor do
 * the web console's files: they are static, and the page must load to ask for the key its own
 * requests then send.
 */
import * as FileSystem from "@effect/platform/FileSystem"
import type * as Headers from "@effect/platform/Headers"
import * as HttpIncomingMessage from "@effect/platform/HttpIncomingMessage"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as ApiKey from "./ApiKey.js"
import * as Console from "./Console.js"
import * as ErrorBodies from "./ErrorBodies.js"
import { HttpConfig } from "./HttpConfig.js"
import { InFlight } from "./InFlight.js"
import { bodyTooLarge, crossOrigin, tooManyRequests, unauthorized } from "./ServerRefusals.js"

/** Paths served without a key and outside the in-flight limit. */
export const openPaths: ReadonlySet<string> = new Set(["/health", ...Console.paths])

/** The request target's path (without query or fragment). */
export const pathOf = (url: string): string => {
  const end = url.search(/[?#]/)
  return end === -1 ? url : url.slice(0, end)
}

/** The body length the client declared, if it did (Node has already refused a malformed one). */
const declaredLength = (headers: Headers.Headers): number | undefined => {
  const length = headers["content-length"]
  return length === undefined ? undefined : Number(length)
}

/**
 * Whether a browser sent the request for a page of another origin: its `Origin` header (which
 * browsers set on cross-origin requests and on every POST) names a host other than the one the
 * request was sent to. Clients that are not browsers send no Origin.
 */
export const isCrossOrigin = (headers: Headers.Headers): boolean => {
  const origin = headers["origin"]
  if (origin === undefined) return false
  try {
    return new URL(origin).host !== headers["host"]
  } catch {
    return true
  }
}

/** The middleware, built once per server (the key's digest is computed here, not per request). */
export const make = Effect.gen(function*() {
  const config = yield* HttpConfig
  const inFlight = yield* InFlight
  const checkKey = config.apiKey === undefined ? undefined : ApiKey.make(config.apiKey)
  const maxBodySize = Option.some(FileSystem.Size(config.maxBodyBytes))
  const refuseFull = (path: string) =>
    Effect.sync(() => ErrorBodies.forPath(path, tooManyRequests(inFlight.limit, config.retryAfterSeconds)))

  return <E, R>(
    handle: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>
  ): Effect.Effect<HttpServerResponse.HttpServerResponse, E, R | HttpServerRequest.HttpServerRequest> =>
    Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
      const path = pathOf(request.url)
      const open = openPaths.has(path)
      if (isCrossOrigin(request.headers)) {
        return Effect.succeed(ErrorBodies.forPath(path, crossOrigin(request.headers["origin"] ?? "")))
      }
      if (checkKey !== undefined && !open) {
        const verdict = checkKey(request.headers)
        if (verdict !== "accepted") {
          return Effect.succeed(
            ErrorBodies.forPath(path, unauthorized(verdict)).pipe(HttpServerResponse.setHeader("www-authenticate", "Bearer"))
          )
        }
      }
      const declared = declaredLength(request.headers)
      if (declared !== undefined && declared > config.maxBodyBytes) {
        return Effect.succeed(ErrorBodies.forPath(path, bodyTooLarge(config.maxBodyBytes, declared)))
      }
      const limited = HttpIncomingMessage.withMaxBodySize(handle, maxBodySize)
      return open ? limited : inFlight.admit(limited, refuseFull(path))
    })
})
