/**
 * A raw client for protocol tests: a Unix socket connection that writes arbitrary bytes and reads
 * the server's newline-delimited JSON messages one at a time, and knows when the server closed it.
 */
import { assert } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import type * as Scope from "effect/Scope"
import * as Net from "node:net"

export interface RawClient {
  /** Writes a JSON message and its newline. */
  readonly send: (message: unknown) => Effect.Effect<void>
  /** Writes bytes as they are. */
  readonly write: (data: string | Uint8Array) => Effect.Effect<void>
  /** The next message from the server (a server `Pong` included). */
  readonly next: Effect.Effect<Record<string, unknown>>
  /** The next message that is not a Pong or Chunk-less noise, for request `id`'s exit. */
  readonly exitOf: (id: string) => Effect.Effect<Record<string, unknown>>
  /** A Ping answered: the server has accepted and read this connection up to here. */
  readonly roundTrip: Effect.Effect<void>
  /** Completes when the server closed the connection. */
  readonly closed: Deferred.Deferred<void>
  /** Stops reading (the server's writes back up). */
  readonly pause: Effect.Effect<void>
  /** Reads again. */
  readonly resume: Effect.Effect<void>
  /** Closes the connection from this side (abruptly). */
  readonly destroy: Effect.Effect<void>
  /** Ends this side's writing (a half-close); reading goes on. */
  readonly end: Effect.Effect<void>
}

export const request = (id: string, tag: string, payload: unknown = {}) => ({ _tag: "Request", id, tag, payload, headers: [] })

/** Connects to `path`; the connection is destroyed with the scope. */
export const connect = (path: string): Effect.Effect<RawClient, never, Scope.Scope> =>
  Effect.gen(function*() {
    const messages = yield* Queue.unbounded<Record<string, unknown>>()
    const closed = yield* Deferred.make<void>()
    const socket = yield* Effect.acquireRelease(
      Effect.async<Net.Socket>((resume) => {
        const socket = Net.createConnection({ path })
        socket.once("connect", () => resume(Effect.succeed(socket)))
        socket.once("error", (cause) => resume(Effect.die(cause)))
      }),
      (socket) => Effect.sync(() => socket.destroy())
    )
    let buffer = ""
    socket.on("data", (data: Buffer) => {
      buffer += data.toString("utf8")
      let nl = buffer.indexOf("\n")
      while (nl !== -1) {
        const line = buffer.slice(0, nl)
        buffer = buffer.slice(nl + 1)
        Queue.unsafeOffer(messages, JSON.parse(line) as Record<string, unknown>)
        nl = buffer.indexOf("\n")
      }
    })
    socket.on("error", () => {})
    socket.on("close", () => Deferred.unsafeDone(closed, Effect.void))
    const write = (data: string | Uint8Array) =>
      Effect.async<void>((resume) => {
        if (socket.destroyed) return resume(Effect.void)
        socket.write(data, () => resume(Effect.void))
      })
    const next = Effect.raceFirst(
      Queue.take(messages),
      Effect.flatMap(Deferred.await(closed), () =>
        Effect.flatMap(Queue.poll(messages), Option.match({
          onSome: Effect.succeed,
          onNone: () => Effect.dieMessage("the server closed the connection")
        })))
    )
    const exitOf = (id: string): Effect.Effect<Record<string, unknown>> =>
      Effect.flatMap(next, (message) => message._tag === "Exit" && message.requestId === id ? Effect.succeed(message) : exitOf(id))
    const roundTrip: Effect.Effect<void> = Effect.zipRight(
      write(JSON.stringify({ _tag: "Ping" }) + "\n"),
      Effect.flatMap(next, (message) => message._tag === "Pong" ? Effect.void : Effect.dieMessage(`expected Pong, got ${JSON.stringify(message)}`))
    )
    return {
      send: (message) => write(JSON.stringify(message) + "\n"),
      write,
      next,
      exitOf,
      roundTrip,
      closed,
      pause: Effect.sync(() => void socket.pause()),
      resume: Effect.sync(() => void socket.resume()),
      destroy: Effect.sync(() => socket.destroy()),
      end: Effect.sync(() => void socket.end())
    } satisfies RawClient
  })

/** The cause of a request's exit message when it failed; undefined when it succeeded. */
export const failureOf = (message: Record<string, unknown>) => {
  const exit = message.exit as { _tag: string; cause: { _tag: string; error?: Record<string, unknown> } }
  return exit._tag === "Failure" ? exit.cause : undefined
}

/** Sends a Count and checks its answer: the connection is admitted and served. */
export const countIsServed = (raw: RawClient, id: string) =>
  Effect.gen(function*() {
    yield* raw.send(request(id, "Count", { text: "abc" }))
    assert.deepStrictEqual((yield* raw.exitOf(id)).exit, {
      _tag: "Success",
      value: { role: "generation", tokens: 3, admittedContext: 4096 }
    })
  })
