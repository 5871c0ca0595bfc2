/**
 * The typed client across a lost connection (issue 12, item 17): a call made while the server is
 * away waits for it (bounded by `reconnectTimeout`) and then goes through; past the bound it fails
 * with EngineUnavailable / RemoteUnavailable naming the socket; a call the server had not answered
 * when the connection dropped is sent again on the next connection. (A stream that had delivered
 * part of its answer is not repeated: calls.test.ts. The real runtime's restart: restart.test.ts.)
 */
import { assert, describe, it } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Context from "effect/Context"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import * as Fs from "node:fs"
import * as Net from "node:net"
import * as Path from "node:path"
import { EngineUnavailable } from "../../src/domain/EngineError.js"
import { Readiness } from "../../src/domain/Inference.js"
import * as Client from "../../src/rpc/Client.js"
import * as ClientProtocol from "../../src/rpc/ClientProtocol.js"
import { Provider } from "../../src/services/Provider.js"
import { serve, tempDir } from "./support/serve.js"
import * as TestProvider from "./support/TestProvider.js"

/** A typed client of `socketPath` waiting at most `reconnectTimeout` for a connection. */
const connectWaiting = (socketPath: string, reconnectTimeout: Duration.DurationInput) =>
  Effect.map(Layer.build(Client.layer({ socketPath, reconnectTimeout })), (context) => ({
    provider: Context.get(context, Provider),
    store: Context.get(context, Client.RemoteStore)
  }))

/** A fresh socket path in a private directory of the scope. */
const freshSocket = Effect.map(tempDir, (dir) => {
  Fs.mkdirSync(Path.join(dir, "run"), { mode: 0o700 })
  return Path.join(dir, "run", "nativegen.sock")
})

/**
 * A stand-in server on `socketPath` (to cause what a real one does only when it dies): answers
 * Readiness, and the n-th Count (1-based, over all connections) with `onCount(n)`'s value, or
 * drops that connection unanswered. Returns the connection number of each Count, as they come.
 */
const fakeServer = (socketPath: string, onCount: (n: number) => unknown | "drop") =>
  Effect.gen(function*() {
    const counts: Array<number> = []
    let connections = 0
    const encodeReadiness = Schema.encodeSync(Readiness)
    const fake = Net.createServer((socket) => {
      const connection = ++connections
      let partial = ""
      socket.setEncoding("utf8")
      socket.on("error", () => {})
      socket.on("data", (data: string) => {
        const lines = (partial + data).split("\n")
        partial = lines.pop()!
        for (const line of lines) {
          const message = JSON.parse(line) as { _tag: string; id: string; tag: string }
          if (message._tag !== "Request") continue
          const answer = (value: unknown) =>
            socket.write(JSON.stringify({ _tag: "Exit", requestId: message.id, exit: { _tag: "Success", value } }) + "\n")
          if (message.tag === "Readiness") answer(encodeReadiness(TestProvider.readiness("ready")))
          if (message.tag === "Count") {
            counts.push(connection)
            const value = onCount(counts.length)
            if (value === "drop") socket.destroy()
            else answer(value)
          }
        }
      })
    })
    yield* Effect.acquireRelease(
      Effect.async<void>((resume) => void fake.listen(socketPath, () => resume(Effect.void))),
      () => Effect.async<void>((resume) => void fake.close(() => resume(Effect.void)))
    )
    return counts
  })

describe("the client across a lost connection", () => {
  it.live("a call made while the server is away waits, and goes through once a server listens on the socket again", () =>
    Effect.gen(function*() {
      const socketPath = yield* freshSocket
      const first = yield* Scope.make()
      yield* Scope.extend(serve({ socketPath }), first)
      const { provider } = yield* connectWaiting(socketPath, "30 seconds")
      assert.strictEqual((yield* provider.count({ text: "a" })).tokens, 1)
      yield* Scope.close(first, Exit.void)
      assert.isFalse(Fs.existsSync(socketPath))
      const call = yield* Effect.fork(provider.count({ text: "abcd" }))
      // Still waiting a while later (before the fix it failed at once with EngineUnavailable).
      assert.isTrue(Option.isNone(yield* Fiber.join(call).pipe(Effect.timeoutOption("500 millis"))))
      yield* serve({ socketPath })
      assert.strictEqual((yield* Fiber.join(call)).tokens, 4)
      assert.strictEqual((yield* provider.readiness).state, "ready")
    }).pipe(Effect.scoped))

  it.live("the wait is bounded: no server within the reconnect timeout is EngineUnavailable (Provider) or RemoteUnavailable (store), naming the socket", () =>
    Effect.gen(function*() {
      const socketPath = yield* freshSocket
      const server = yield* Scope.make()
      yield* Scope.extend(serve({ socketPath }), server)
      const { provider, store } = yield* connectWaiting(socketPath, "400 millis")
      yield* Scope.close(server, Exit.void)
      const started = Date.now()
      const error = yield* Effect.flip(provider.count({ text: "a" }))
      const waited = Date.now() - started
      assert.instanceOf(error, EngineUnavailable)
      assert.include(error.reason, socketPath)
      assert.include(error.reason, "not connected within 400ms")
      assert.include(error.reason, "there is no socket")
      assert.isAtLeast(waited, 350)
      assert.isBelow(waited, 5_000)
      const storeError = yield* Effect.flip(store.list)
      assert.instanceOf(storeError, Client.RemoteUnavailable)
      assert.strictEqual(storeError.socketPath, socketPath)
      const readiness = yield* provider.readiness
      assert.strictEqual(readiness.state, "failed")
      assert.include(readiness.reason, socketPath)
    }).pipe(Effect.scoped))

  it.live("a call the server had not answered when the connection dropped is sent again on the next connection", () =>
    Effect.gen(function*() {
      const socketPath = yield* freshSocket
      // Drops the first connection on which a Count arrives, unanswered, and answers on the next:
      // what a server that dies (or closes for a limit) before answering does.
      const counts = yield* fakeServer(socketPath, (n) => n === 1 ? "drop" : { role: "generation", tokens: 7, admittedContext: 64 })
      const { provider } = yield* connectWaiting(socketPath, "10 seconds")
      assert.strictEqual((yield* provider.count({ text: "x" })).tokens, 7)
      assert.deepStrictEqual(counts, [1, 2])
    }).pipe(Effect.scoped))

  it.live("a server that keeps dropping a call unanswered cannot make it wait past the reconnect timeout", () =>
    Effect.gen(function*() {
      const socketPath = yield* freshSocket
      const counts = yield* fakeServer(socketPath, () => "drop")
      const { provider } = yield* connectWaiting(socketPath, "2 seconds")
      const started = Date.now()
      const error = yield* Effect.flip(provider.count({ text: "x" }))
      assert.instanceOf(error, EngineUnavailable)
      assert.include(error.reason, "the server closed the connection")
      assert.isBelow(Date.now() - started, 10_000)
      assert.isAbove(counts.length, 1)
      // Connections lost unanswered back off (from 50 ms, doubling) rather than start afresh: about
      // seven in 2 s, where reconnecting at once each time would make thousands.
      assert.isBelow(counts.length, 12)
    }).pipe(Effect.scoped))

  it.effect("reconnection waits 50 ms doubling, jittered by at most 20 %, never more than 1 s", () =>
    Effect.gen(function*() {
      const delays = yield* Schedule.run(Schedule.delays(ClientProtocol.reconnectSchedule), 0, Array.from({ length: 12 }, (_, i) => i))
      Chunk.toReadonlyArray(delays).forEach((delay, i) => {
        const base = 50 * 2 ** i
        assert.isAtLeast(Duration.toMillis(delay), Math.min(0.8 * base, 1000), `delay ${i}`)
        assert.isAtMost(Duration.toMillis(delay), Math.min(1.2 * base, 1000), `delay ${i}`)
      })
    }))
})
