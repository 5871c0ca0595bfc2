/**
 * Calls through a real socket with the typed client, over the test Provider: generation streams
 * chunk by chunk, typed errors arrive as themselves, the other calls pass through, and a client
 * that goes away (interrupting its call, or dropping its connection) cancels the Provider's work.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Chunk from "effect/Chunk"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as SubscriptionRef from "effect/SubscriptionRef"
import * as Fs from "node:fs"
import { EngineUnavailable, GenerationFailed } from "../../src/domain/EngineError.js"
import { QueueFull } from "../../src/services/ProviderError.js"
import { connect as rawConnect, request } from "./support/RawClient.js"
import { connect, serve } from "./support/serve.js"
import { done, readiness, type TestProviderControl, text } from "./support/TestProvider.js"
import type { Provider } from "../../src/services/Provider.js"

/** A generation read in the background, once its first chunk (two tokens) has reached the reader. */
const oneChunkIn = (provider: Provider["Type"], control: TestProviderControl) =>
  Effect.gen(function*() {
    const received = yield* Deferred.make<void>()
    const fiber = yield* provider.generate({ messages: [], maxTokens: 100 }).pipe(
      Stream.runForEach(() => Deferred.succeed(received, undefined)),
      Effect.fork
    )
    const generation = yield* Queue.take(control.generations)
    yield* generation.offer(text("x", [5, 6]))
    yield* Deferred.await(received)
    return { fiber, generation }
  })

describe("RPC calls", () => {
  it.scoped("generate streams each chunk as the Provider produces it, and ends with Done", () =>
    Effect.gen(function*() {
      const { control, socketPath } = yield* serve()
      const { provider } = yield* connect(socketPath)
      const pull = yield* Stream.toPull(provider.generate({ messages: [{ role: "user", content: "hi" }], maxTokens: 4 }))
      const first = yield* Effect.fork(pull)
      const generation = yield* Queue.take(control.generations)
      assert.deepStrictEqual(generation.request.messages, [{ role: "user", content: "hi" }])
      // Nothing is buffered until the end: the first chunk arrives before the second exists.
      yield* generation.offer(text("Hel"))
      assert.deepStrictEqual(Chunk.toArray(yield* Fiber.join(first)), [{ _tag: "Text", channel: "answer", text: "Hel", tokens: [1] }])
      yield* generation.offer(text("lo", [2, 3]))
      yield* generation.offer(done)
      yield* generation.offer({ _tag: "End" })
      const rest: Array<unknown> = []
      for (;;) {
        const exit = yield* Effect.exit(pull)
        if (Exit.isFailure(exit)) {
          // The end of the stream, not a failure.
          assert.deepStrictEqual(Cause.failureOption(exit.cause), Option.some(Option.none()))
          break
        }
        rest.push(...Chunk.toArray(exit.value))
      }
      assert.deepStrictEqual(rest.map((c) => (c as { _tag: string })._tag), ["Text", "Done"])
      const ended = yield* Deferred.await(generation.ended)
      assert.isTrue(Exit.isSuccess(ended))
    }))

  it.scoped("generate ends at Done, before the server's stream ends; the server's generation then ends uninterrupted", () =>
    Effect.gen(function*() {
      const { control, socketPath } = yield* serve()
      const { provider } = yield* connect(socketPath)
      const collecting = yield* Effect.fork(Stream.runCollect(provider.generate({ messages: [{ role: "user", content: "hi" }], maxTokens: 1 })))
      const generation = yield* Queue.take(control.generations)
      yield* generation.offer(text("Hi"))
      yield* generation.offer(done)
      // The server's stream stays open (the Provider still releasing what the request held): the
      // caller has its whole answer anyway.
      const chunks = yield* Fiber.join(collecting)
      assert.deepStrictEqual(Chunk.toArray(chunks).map((c) => c._tag), ["Text", "Done"])
      assert.isFalse(yield* Deferred.isDone(generation.ended))
      yield* generation.offer({ _tag: "End" })
      const ended = yield* Deferred.await(generation.ended)
      assert.isTrue(Exit.isSuccess(ended), "not interrupted by the client")
    }))

  it.scoped("the server runs requests without Effect's fiber metrics", () =>
    Effect.gen(function*() {
      const { control, socketPath } = yield* serve()
      const { provider } = yield* connect(socketPath)
      yield* provider.decide({ prompt: "is it?", heads: [{ name: "answer", labels: ["yes", "no"] }] })
      assert.isFalse(control.lastDecide.fiberMetrics)
    }))

  it.scoped("a Provider error ends the stream with that error, typed and with its fields", () =>
    Effect.gen(function*() {
      const { control, socketPath } = yield* serve()
      const { provider } = yield* connect(socketPath)
      const fiber = yield* Effect.fork(Stream.runCollect(provider.generate({ messages: [], maxTokens: 1 })))
      const generation = yield* Queue.take(control.generations)
      yield* generation.offer(text("a"))
      yield* generation.offer({ _tag: "Fail", error: new QueueFull({ lane: "foreground", limit: 7 }) })
      const error = yield* Effect.flip(Fiber.join(fiber))
      assert.instanceOf(error, QueueFull)
      assert.deepStrictEqual({ ...error }, { ...new QueueFull({ lane: "foreground", limit: 7 }) })
      assert.strictEqual(error.message, "the foreground queue is full (7 requests waiting)")
    }))

  it.scoped("decide, count, tokenize, prepare and readiness pass through; decide's typed failure too", () =>
    Effect.gen(function*() {
      const { control, socketPath } = yield* serve()
      const { provider } = yield* connect(socketPath)
      const decision = yield* provider.decide({ prompt: "is it?", heads: [{ name: "h", labels: ["yes", "no"] }] })
      assert.deepStrictEqual(decision.heads[0]?.labels.map((l) => [l.label, l.rank]), [["yes", 1], ["no", 2]])
      const refused = yield* Effect.flip(provider.decide({ prompt: "fail", heads: [] }))
      assert.strictEqual(refused._tag, "InvalidRequest")
      assert.strictEqual(refused.message, "invalid prompt fail: the test says so")
      assert.deepStrictEqual(yield* provider.count({ text: "abcd" }), { role: "generation", tokens: 4, admittedContext: 4096 })
      assert.deepStrictEqual(
        yield* provider.tokenize({ role: "decision", text: "ab" }),
        { role: "decision", tokens: [97, 98], admittedContext: 4096 }
      )
      assert.deepStrictEqual(
        yield* provider.prepare({ conversation: "c", prefix: [], history: [] }),
        { conversation: "c", preparedTokens: 5, totalTokens: 5, complete: true }
      )
      assert.deepStrictEqual(yield* provider.readiness, readiness("ready"))
      yield* SubscriptionRef.set(control.readiness, readiness("repairing"))
      assert.strictEqual((yield* provider.readiness).state, "repairing")
    }))

  it.scoped("readiness changes stream: the current one first, then each change", () =>
    Effect.gen(function*() {
      const { control, socketPath } = yield* serve()
      const { provider } = yield* connect(socketPath)
      const pull = yield* Stream.toPull(provider.readinessChanges.pipe(Stream.map((r) => r.state)))
      assert.deepStrictEqual(Chunk.toArray(yield* pull), ["ready"])
      yield* SubscriptionRef.set(control.readiness, readiness("repairing"))
      assert.deepStrictEqual(Chunk.toArray(yield* pull), ["repairing"])
    }))

  it.scoped("interrupting the client's stream interrupts the Provider's generation", () =>
    Effect.gen(function*() {
      const { control, socketPath } = yield* serve()
      const { provider } = yield* connect(socketPath)
      const received = yield* Deferred.make<void>()
      const fiber = yield* provider.generate({ messages: [], maxTokens: 100 }).pipe(
        Stream.runForEach(() => Deferred.succeed(received, undefined)),
        Effect.fork
      )
      const generation = yield* Queue.take(control.generations)
      yield* generation.offer(text("x"))
      yield* Deferred.await(received)
      yield* Fiber.interrupt(fiber)
      const ended = yield* Deferred.await(generation.ended)
      assert.isTrue(Exit.isInterrupted(ended))
    }))

  it.scoped("a client that disconnects mid-stream cancels its generation; other connections keep working", () =>
    Effect.gen(function*() {
      const { control, socketPath } = yield* serve()
      const raw = yield* rawConnect(socketPath)
      yield* raw.send(request("1", "Generate", { messages: [], maxTokens: 100 }))
      const generation = yield* Queue.take(control.generations)
      yield* generation.offer(text("x"))
      const chunk = yield* raw.next
      assert.strictEqual(chunk._tag, "Chunk")
      yield* raw.destroy
      const ended = yield* Deferred.await(generation.ended)
      assert.isTrue(Exit.isInterrupted(ended))
      const { provider } = yield* connect(socketPath)
      assert.strictEqual((yield* provider.count({ text: "ok" })).tokens, 2)
    }))

  it.scoped("a server that shuts down mid-stream: the generation fails with GenerationFailed, the socket is removed", () =>
    Effect.gen(function*() {
      const serverScope = yield* Scope.make()
      const { control, socketPath } = yield* Scope.extend(serve(), serverScope)
      const { provider } = yield* connect(socketPath)
      const { fiber, generation } = yield* oneChunkIn(provider, control)
      yield* Scope.close(serverScope, Exit.void)
      assert.isTrue(Exit.isInterrupted(yield* Deferred.await(generation.ended)))
      assert.isFalse(Fs.existsSync(socketPath))
      const error = yield* Effect.flip(Fiber.join(fiber))
      assert.instanceOf(error, GenerationFailed)
      assert.strictEqual(error.deliveredTokens, 2)
      assert.include(error.reason, socketPath)
    }))

  it.scoped("a client closed while its generation streams: the reader fails with GenerationFailed, and the server stops the generation", () =>
    Effect.gen(function*() {
      const { control, socketPath } = yield* serve()
      const clientScope = yield* Scope.make()
      const { provider } = yield* Scope.extend(connect(socketPath), clientScope)
      const { fiber, generation } = yield* oneChunkIn(provider, control)
      yield* Scope.close(clientScope, Exit.void)
      const error = yield* Effect.flip(Fiber.join(fiber))
      assert.instanceOf(error, GenerationFailed)
      assert.strictEqual(error.deliveredTokens, 2)
      assert.include(error.reason, "the client was closed")
      assert.isTrue(Exit.isInterrupted(yield* Deferred.await(generation.ended)))
    }))

  it.scoped("an EngineUnavailable from the Provider arrives as itself", () =>
    Effect.gen(function*() {
      const { control, socketPath } = yield* serve()
      const { provider } = yield* connect(socketPath)
      const fiber = yield* Effect.fork(Stream.runCollect(provider.generate({ messages: [], maxTokens: 1 })))
      const generation = yield* Queue.take(control.generations)
      yield* generation.offer({ _tag: "Fail", error: new EngineUnavailable({ reason: "repairing" }) })
      const error = yield* Effect.flip(Fiber.join(fiber))
      assert.instanceOf(error, EngineUnavailable)
      assert.strictEqual(error.reason, "repairing")
    }))
})
