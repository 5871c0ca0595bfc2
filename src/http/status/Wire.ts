/**
 * What the `/nativegen/` routes need of the wire until the server core's shared helpers are
 * merged: a JSON body decoded by a Schema as a typed result (a 400 naming the field otherwise),
 * and a stream of named server-sent events.
 */
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import { badRequest, type Refusal } from "../Refusals.js"

/** The request's JSON body decoded by `schema`, or the refusal naming what is wrong with it. */
export const readJson = <A, I>(schema: Schema.Schema<A, I>) =>
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const text = yield* Effect.either(request.text)
    if (Either.isLeft(text)) return Either.left(badRequest(`the request body could not be read: ${text.left.message}`))
    let json: unknown
    try {
      json = JSON.parse(text.right)
    } catch (cause) {
      return Either.left(badRequest(`the request body is not JSON: ${cause instanceof Error ? cause.message : String(cause)}`))
    }
    return Either.mapLeft(Schema.decodeUnknownEither(schema)(json, { errors: "first" }), (error): Refusal => {
      const issue = ParseResult.ArrayFormatter.formatErrorSync(error)[0]
      const param = issue === undefined || issue.path.length === 0 ? null : pathOf(issue.path)
      return badRequest(`${param ?? "body"}: ${issue?.message ?? error.message}`, param)
    })
  })

/** A parse issue's path as a client writes it: `heads[0].labels`. */
const pathOf = (path: ReadonlyArray<PropertyKey>) =>
  path.map((key, i) => (typeof key === "number" ? `[${key}]` : i === 0 ? String(key) : `.${String(key)}`)).join("")

/** One server-sent event: its name and its JSON payload. */
export interface NamedEvent {
  readonly event: string
  readonly data: unknown
}

const encoder = new TextEncoder()

/** `event: <name>` and `data: <json>` lines per event, as `text/event-stream`, unbuffered by proxies. */
export const eventStream = <E>(events: Stream.Stream<NamedEvent, E>) =>
  HttpServerResponse.stream(
    Stream.map(events, ({ data, event }) => encoder.encode(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`)),
    {
      contentType: "text/event-stream",
      headers: { "cache-control": "no-cache", "x-accel-buffering": "no" }
    }
  )
