/**
 * Server-sent events as OpenAI streams them: each event one `data: <JSON>` line and a blank line,
 * the stream closed by `data: [DONE]` (not after an error event). Minimal on purpose: the server's
 * shared SSE helper replaces it when both are merged.
 */
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Stream from "effect/Stream"

const encoder = new TextEncoder()

/** One event carrying `data` as JSON. */
export const event = (data: unknown): Uint8Array => encoder.encode(`data: ${JSON.stringify(data)}\n\n`)

/** The event that ends a stream that did not fail. */
export const done: Uint8Array = encoder.encode("data: [DONE]\n\n")

/** A 200 `text/event-stream` response of already encoded events. */
export const response = (events: Stream.Stream<Uint8Array>): HttpServerResponse.HttpServerResponse =>
  HttpServerResponse.stream(events, {
    contentType: "text/event-stream",
    headers: { "cache-control": "no-cache", "x-accel-buffering": "no" }
  })
