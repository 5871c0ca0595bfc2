/**
 * Connection limits (issue 12, item 16): connections that sent no request are bounded in number
 * (the oldest goes) and in time; an admitted connection with nothing in flight is closed when idle
 * and makes room for a newcomer when every slot is taken; only when every admitted connection is
 * busy is a newcomer refused, with `TooManyConnections` naming the limit. Every close for a limit
 * is preceded by a notice naming it, and a client is served promptly throughout. The server's
 * timers run on the Effect clock: TestClock moves them.
 */
import { assert, describe, it } from "@effect/vitest"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Queue from "effect/Queue"
import * as Stream from "effect/Stream"
import * as TestClock from "effect/TestClock"
import { EngineUnavailable } from "../../src/domain/EngineError.js"
import { TooManyConnections } from "../../src/rpc/RpcError.js"
import * as Server from "../../src/rpc/Server.js"
import { connect as rawConnect, countIsServed, failureOf, type RawClient, request } from "./support/RawClient.js"
import { connect, serve } from "./support/serve.js"
import { done, text } from "./support/TestProvider.js"



/** The next message is a closing notice with `error`, and then the server closes the connection. */
const closedWithNotice = (raw: RawClient, error: Record<string, unknown>) =>
  Effect.gen(function*() {
    const notice = yield* raw.next
    assert.strictEqual(notice._tag, "Defect")
    assert.deepStrictEqual(notice.defect, error)
    yield* Deferred.await(raw.closed)
  })

describe("connections that have not sent a request", () => {
  it.scoped("a flood of silent connections: the oldest beyond the pending limit are closed with a notice, the rest at the first-message timeout; a client is served throughout", () =>
    Effect.gen(function*() {
      const { socketPath } = yield* serve({ maxPendingConnections: 4, maxConnections: 4 })
      const silent: Array<RawClient> = []
      for (let i = 0; i < 6; i++) {
        const raw = yield* rawConnect(socketPath)
        // A ping is answered, and does not count as a first request.
        yield* raw.roundTrip
        silent.push(raw)
      }
      // A request trickled in part and never finished is no request either.
      yield* silent[5]!.write(`{"_tag":"Request","id":"1","tag":"Count","payload":{"text":"`)
      for (const raw of silent.slice(0, 2)) yield* closedWithNotice(raw, { _tag: "TooManyPendingConnections", limit: 4 })
      // A client connects (pending for a moment, evicting the oldest silent one) and is served at once.
      const { provider } = yield* connect(socketPath)
      assert.strictEqual((yield* provider.count({ text: "ab" })).tokens, 2)
      yield* closedWithNotice(silent[2]!, { _tag: "TooManyPendingConnections", limit: 4 })
      yield* TestClock.adjust("10 seconds")
      for (const raw of silent.slice(3)) yield* closedWithNotice(raw, { _tag: "FirstMessageTimeout", timeoutMillis: 10_000 })
      // The client's connection is admitted: no first-message deadline applies to it.
      assert.strictEqual((yield* provider.count({ text: "abc" })).tokens, 3)
    }))
})

describe("admitted connections", () => {
  it.scoped("when every slot is held by an idle connection, a newcomer is served at once: the one idle longest is closed with a notice", () =>
    Effect.gen(function*() {
      const { socketPath } = yield* serve({ maxConnections: 2 })
      const first = yield* rawConnect(socketPath)
      yield* countIsServed(first, "1")
      const second = yield* rawConnect(socketPath)
      yield* countIsServed(second, "1")
      yield* TestClock.adjust("1 second")
      // The second is now the more recently active one.
      yield* countIsServed(second, "2")
      const newcomer = yield* rawConnect(socketPath)
      yield* countIsServed(newcomer, "1")
      yield* closedWithNotice(first, { _tag: "TooManyConnections", limit: 2 })
      yield* countIsServed(second, "3")
    }))

  it.scoped("when every admitted connection is busy, a newcomer's request fails with TooManyConnections, then a notice, then it is closed", () =>
    Effect.gen(function*() {
      const { control, socketPath } = yield* serve({ maxConnections: 2 })
      const busy: Array<RawClient> = []
      for (let i = 0; i < 2; i++) {
        const raw = yield* rawConnect(socketPath)
        yield* raw.send(request("1", "Generate", { messages: [], maxTokens: 1 }))
        busy.push(raw)
      }
      const generations = [yield* Queue.take(control.generations), yield* Queue.take(control.generations)]
      const newcomer = yield* rawConnect(socketPath)
      yield* newcomer.send(request("7", "Count", { text: "a" }))
      assert.deepStrictEqual(failureOf(yield* newcomer.exitOf("7"))?.error, { _tag: "TooManyConnections", limit: 2 })
      yield* closedWithNotice(newcomer, { _tag: "TooManyConnections", limit: 2 })
      // The busy ones are served throughout; once one is done, a newcomer takes its place.
      yield* generations[0]!.offer({ _tag: "End" })
      assert.deepStrictEqual((yield* busy[0]!.exitOf("1")).exit, { _tag: "Success" })
      yield* countIsServed(busy[1]!, "2")
      const next = yield* rawConnect(socketPath)
      yield* countIsServed(next, "1")
      yield* generations[1]!.offer({ _tag: "End" })
      assert.deepStrictEqual((yield* busy[1]!.exitOf("1")).exit, { _tag: "Success" })
    }))

  it.live("the typed client refused for the connection limit gets it typed, whatever the race: EngineUnavailable naming the limit, TooManyConnections from the store; served once a slot frees", () =>
    Effect.gen(function*() {
      const { control, socketPath } = yield* serve({ maxConnections: 1, maxPendingConnections: 2 })
      const holder = yield* rawConnect(socketPath)
      yield* holder.send(request("1", "Generate", { messages: [], maxTokens: 1 }))
      const generation = yield* Queue.take(control.generations)
      const clients = yield* Effect.forEach(Array.from({ length: 8 }), () => connect(socketPath), { concurrency: "unbounded" })
      // Each client calls three times at once: every call is refused with the limit, none sees a defect.
      const errors = yield* Effect.forEach(
        clients.flatMap(({ provider }) => [provider, provider, provider]),
        (provider) => Effect.flip(provider.count({ text: "a" })),
        { concurrency: "unbounded" }
      )
      for (const error of errors) {
        assert.instanceOf(error, EngineUnavailable)
        assert.include(error.reason, socketPath)
        assert.match(error.reason, /limit of (1|2) connections/)
      }
      const { provider, store } = clients[0]!
      assert.instanceOf(yield* Effect.flip(store.list), TooManyConnections)
      assert.strictEqual((yield* provider.readiness).state, "failed")
      yield* generation.offer({ _tag: "End" })
      yield* holder.exitOf("1")
      yield* holder.destroy
      yield* Deferred.await(holder.closed)
      assert.strictEqual((yield* provider.count({ text: "ab" })).tokens, 2)
    }).pipe(Effect.scoped))

  it.scoped("an admitted connection with nothing in flight is closed after the idle timeout with a notice; one with a stream in flight is kept", () =>
    Effect.gen(function*() {
      const { control, socketPath } = yield* serve({ idleTimeout: Duration.minutes(1), ackTimeout: Duration.hours(1) })
      const idle = yield* rawConnect(socketPath)
      yield* countIsServed(idle, "1")
      const streaming = yield* rawConnect(socketPath)
      yield* streaming.send(request("1", "Generate", { messages: [], maxTokens: 1 }))
      const generation = yield* Queue.take(control.generations)
      yield* TestClock.adjust("59 seconds")
      yield* countIsServed(idle, "2")
      yield* TestClock.adjust("59 seconds")
      yield* countIsServed(idle, "3")
      yield* TestClock.adjust("1 minute")
      yield* closedWithNotice(idle, { _tag: "IdleTimeout", timeoutMillis: 60_000 })
      // Two minutes without a request, but its stream is in flight: kept, and served.
      yield* streaming.roundTrip
      yield* generation.offer(text("t"))
      yield* generation.offer(done)
      yield* generation.offer({ _tag: "End" })
      const chunk = yield* streaming.next
      assert.strictEqual(chunk._tag, "Chunk")
      yield* streaming.send({ _tag: "Ack", requestId: "1" })
      assert.strictEqual((yield* streaming.next)._tag, "Chunk")
      yield* streaming.send({ _tag: "Ack", requestId: "1" })
      assert.deepStrictEqual((yield* streaming.exitOf("1")).exit, { _tag: "Success" })
      assert.isFalse(yield* Deferred.isDone(streaming.closed))
    }))

  it.scoped("the typed client whose connection was closed for idleness is served on its next call, and a stream started after it is not cut", () =>
    Effect.gen(function*() {
      const { control, socketPath } = yield* serve({ idleTimeout: Duration.minutes(1) })
      const { provider } = yield* connect(socketPath)
      assert.strictEqual((yield* provider.count({ text: "a" })).tokens, 1)
      yield* TestClock.adjust("2 minutes")
      assert.strictEqual((yield* provider.count({ text: "ab" })).tokens, 2)
      const fiber = yield* Effect.fork(Stream.runCollect(provider.generate({ messages: [], maxTokens: 1 })))
      const generation = yield* Queue.take(control.generations)
      yield* generation.offer(text("t"))
      yield* generation.offer(done)
      yield* generation.offer({ _tag: "End" })
      assert.strictEqual((yield* Fiber.join(fiber)).length, 2)
      assert.isTrue(Exit.isSuccess(yield* Deferred.await(generation.ended)))
    }))
})

describe("server config", () => {
  it.effect("the limits come from NATIVEGEN_SERVER_*, each defaulting to the stated default (5 minutes idle, 10 s to the first request)", () =>
    Effect.gen(function*() {
      const { socketPath: _, ...defaults } = Server.defaults
      assert.strictEqual(Duration.toMillis(defaults.idleTimeout), 5 * 60_000)
      assert.strictEqual(Duration.toMillis(defaults.firstMessageTimeout), 10_000)
      assert.deepStrictEqual(yield* Effect.withConfigProvider(Server.config, ConfigProvider.fromMap(new Map())), defaults)
      const configured = yield* Effect.withConfigProvider(
        Server.config,
        ConfigProvider.fromMap(new Map([["NATIVEGEN_SERVER_IDLE_TIMEOUT", "10 minutes"], ["NATIVEGEN_SERVER_MAX_CONNECTIONS", "8"]]))
      )
      assert.deepStrictEqual(configured, { ...defaults, idleTimeout: Duration.minutes(10), maxConnections: 8 })
    }))
})
