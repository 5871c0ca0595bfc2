/**
 * Streamed responses: server-sent events (OpenAI: `:\n\n` at once unless left out, `data: <json>\n\n` per
 * element, then `data: [DONE]\n\n`) and newline-delimited JSON (Ollama: one object a line). A failure in
 * mid-stream, after the status has been sent, becomes one last element in the API's shape (the
 * `onFailure` mapping), and the response ends; a route that awaits its stream's first elements
 * (`started`) before it answers keeps a refusal's status for a failure before any output. The
 * response's body runs in the request's fiber:
 * a client that goes away interrupts it, and with it the stream it was made from (the
 * generation).
 */
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import { identity } from "effect/Function"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"

const encoder = new TextEncoder()

/** Headers that keep proxies from buffering or caching an event stream. */
const eventStreamHeaders = { "cache-control": "no-cache", "x-accel-buffering": "no" }

const event = (data: unknown) => encoder.encode(`data: ${JSON.stringify(data)}\n\n`)

/**
 * A comment line (clients skip it) sent first: Node sends a response's headers with its first
 * bytes, and a client waits for them before it reads on, through a prefill that may be long.
 */
const opening = encoder.encode(":\n\n")

/** OpenAI's end of stream. */
const done = encoder.encode("data: [DONE]\n\n")

export interface EventStreamOptions<E> {
  /** The last event's data when the stream fails (e.g. `{"error": {...}}`); no end marker follows it. */
  readonly onFailure: (error: E) => unknown
  /** Send `data: [DONE]` after the last element (OpenAI's end marker). Default true. */
  readonly endMarker?: boolean | undefined
  /**
   * Send the opening comment. Default true; a route that has awaited its stream's first element
   * before answering (so that a refusal keeps its status) has its first bytes ready and leaves it out.
   */
  readonly opening?: boolean | undefined
  readonly status?: number | undefined
}

/** A `text/event-stream` response of `events`, each element's JSON as one event, after an opening comment (unless left out). */
export const serverSentEvents = <A, E>(events: Stream.Stream<A, E>, options: EventStreamOptions<E>): HttpServerResponse.HttpServerResponse =>
  HttpServerResponse.stream(
    events.pipe(
      Stream.map(event),
      options.opening === false ? identity : Stream.prepend(Chunk.of(opening)),
      Stream.concat(options.endMarker === false ? Stream.empty : Stream.succeed(done)),
      Stream.catchAll((error) => Stream.succeed(event(options.onFailure(error))))
    ),
    { status: options.status, contentType: "text/event-stream", headers: eventStreamHeaders }
  )

export interface NdjsonOptions<E> {
  /** The last line when the stream fails (Ollama: `{"error": "..."}`). */
  readonly onFailure: (error: E) => unknown
  readonly status?: number | undefined
}

/** An `application/x-ndjson` response of `lines`, each element's JSON on a line of its own. */
export const ndjson = <A, E>(lines: Stream.Stream<A, E>, options: NdjsonOptions<E>): HttpServerResponse.HttpServerResponse =>
  HttpServerResponse.stream(
    lines.pipe(
      Stream.catchAll((error) => Stream.succeed(options.onFailure(error))),
      Stream.map((line) => encoder.encode(`${JSON.stringify(line)}\n`))
    ),
    { status: options.status, contentType: "application/x-ndjson" }
  )

/**
 * Starts `stream` in the current scope (the request's, which lasts until the response is sent)
 * and waits for its first elements: it fails as the stream fails before any output, else gives
 * the whole stream (the elements already pulled, then the rest). A route answers a failure here
 * with the refusal's own status instead of a 200 stream that fails (an invalid request, a prompt
 * over the context, a full queue, an engine being repaired).
 */
export const started = <A, E>(stream: Stream.Stream<A, E>): Effect.Effect<Stream.Stream<A, E>, E, Scope.Scope> =>
  Effect.gen(function*() {
    const pull = yield* Stream.toPull(stream)
    const rest = Stream.repeatEffectChunkOption(pull)
    for (;;) {
      const first = yield* Effect.either(pull)
      if (Either.isLeft(first)) {
        return Option.isSome(first.left) ? yield* Effect.fail(first.left.value) : Stream.empty
      }
      if (Chunk.isNonEmpty(first.right)) return Stream.concat(Stream.fromChunk(first.right), rest)
    }
  })
