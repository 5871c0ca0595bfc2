/**
 * Newline-delimited JSON, Ollama's stream format: one JSON object per line, sent as each is made
 * (`application/x-ndjson`). A failure inside the stream becomes its last line, `{"error": ...}`, as
 * Ollama ends a stream that fails after it has begun. Kept small and separate so that the
 * server's shared stream helpers can replace it.
 */
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Stream from "effect/Stream"

export const contentType = "application/x-ndjson"

const encoder = new TextEncoder()

/** One line: the value's JSON and a newline. */
export const line = (value: unknown): Uint8Array => encoder.encode(`${JSON.stringify(value)}\n`)

/** A 200 response streaming `values` as lines; a failure is written as a last `{"error": message}` line. */
export const response = <A, E>(
  values: Stream.Stream<A, E>,
  messageOf: (error: E) => string
): HttpServerResponse.HttpServerResponse =>
  HttpServerResponse.stream(
    values.pipe(
      Stream.map(line),
      Stream.catchAll((error) => Stream.make(line({ error: messageOf(error) })))
    ),
    { contentType }
  )
