/**
 * The wire under abuse: malformed messages, oversized messages and too many requests on one
 * connection. Each time the offending request (or connection) gets a typed refusal and the server
 * goes on serving the others. (Connection limits: connections.test.ts; other hostile input:
 * hostile.test.ts.)
 */
import { assert, describe, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Queue from "effect/Queue"
import * as Stream from "effect/Stream"
import { EngineUnavailable } from "../../src/domain/EngineError.js"
import { InvalidRequest } from "../../src/services/ProviderError.js"
import { Framer } from "../../src/rpc/Framing.js"
import { MessageTooLarge, TooManyRequests } from "../../src/rpc/RpcError.js"
import { connect as rawConnect, type RawClient, request } from "./support/RawClient.js"
import { connect, serve } from "./support/serve.js"
import { done, text } from "./support/TestProvider.js"

const failureOf = (exit: Record<string, unknown>) => {
  const e = exit.exit as { _tag: string; cause: { _tag: string; error?: Record<string, unknown>; defect?: unknown } }
  return e._tag === "Failure" ? e.cause : undefined
}

const countIsServed = (raw: RawClient, id: string) =>
  Effect.gen(function*() {
    yield* raw.send(request(id, "Count", { text: "abc" }))
    const exit = yield* raw.exitOf(id)
    assert.deepStrictEqual(exit.exit, { _tag: "Success", value: { role: "generation", tokens: 3, admittedContext: 4096 } })
  })

describe("Framer", () => {
  it("splits frames across chunks and skips an oversized frame without buffering it", () => {
    const framer = new Framer(8)
    const frames: Array<string> = []
    const oversized: Array<[string, number]> = []
    const push = (s: string) =>
      framer.push(Buffer.from(s), (f) => frames.push(f.toString()), (head, size) => oversized.push([head.toString(), size]))
    push("ab")
    push("c\nde")
    push("f\n\n0123456")
    push("789abcdef")
    push("xyz\nok\n")
    assert.deepStrictEqual(frames, ["abc", "def", "ok"])
    // Reported once, with what had arrived when it went over (a chunk is never split for this).
    assert.deepStrictEqual(oversized, [["0123456789abcdef", 16]])
  })
})

describe("RPC protocol", () => {
  it.scoped("malformed messages get a defect or a per-request failure, and the connection keeps working", () =>
    Effect.gen(function*() {
      const { socketPath } = yield* serve()
      const raw = yield* rawConnect(socketPath)
      yield* raw.write("this is not json\n")
      const notJson = yield* raw.next
      assert.strictEqual(notJson._tag, "Defect")
      assert.include(String(notJson.defect), "malformed message")
      yield* raw.send(42)
      assert.strictEqual((yield* raw.next)._tag, "Defect")
      // An envelope with an id but a bad shape fails that request only.
      yield* raw.send({ _tag: "Request", id: "7", tag: 5 })
      assert.strictEqual(failureOf(yield* raw.exitOf("7"))?._tag, "Die")
      // An unknown tag fails that request only.
      yield* raw.send(request("8", "Format the disk"))
      const unknown = failureOf(yield* raw.exitOf("8"))
      assert.strictEqual(unknown?._tag, "Die")
      assert.include(String(unknown?.defect), "unknown request tag")
      // A payload that does not decode fails that request only.
      yield* raw.send(request("9", "Count", { text: 5 }))
      assert.strictEqual(failureOf(yield* raw.exitOf("9"))?._tag, "Die")
      // An id beyond 20 digits is not an id: a defect, and nothing is run.
      yield* raw.send(request("1".repeat(4096), "Count", { text: "a" }))
      const hugeId = yield* raw.next
      assert.strictEqual(hugeId._tag, "Defect")
      assert.include(String(hugeId.defect), "RequestId")
      yield* countIsServed(raw, "10")
    }))

  it.scoped("an oversized request fails with MessageTooLarge; the same connection and others keep working", () =>
    Effect.gen(function*() {
      const { socketPath } = yield* serve({ maxMessageBytes: 4096 })
      const raw = yield* rawConnect(socketPath)
      const other = yield* rawConnect(socketPath)
      const big = JSON.stringify(request("3", "Count", { text: "x".repeat(1024 * 1024) })) + "\n"
      // Written in pieces: the server refuses it as soon as it is over the limit, and skips the rest.
      for (let i = 0; i < big.length; i += 65536) yield* raw.write(big.slice(i, i + 65536))
      const refused = failureOf(yield* raw.exitOf("3"))
      assert.strictEqual(refused?._tag, "Fail")
      assert.strictEqual(refused?.error?._tag, "MessageTooLarge")
      assert.strictEqual(refused?.error?.limit, 4096)
      assert.isAbove(Number(refused?.error?.size), 4096)
      yield* countIsServed(raw, "4")
      yield* countIsServed(other, "1")
    }))

  it.scoped("the typed client sees an oversized request as InvalidRequest (Provider) or MessageTooLarge (store)", () =>
    Effect.gen(function*() {
      const { socketPath } = yield* serve({ maxMessageBytes: 4096 })
      const { provider, store } = yield* connect(socketPath)
      const error = yield* Effect.flip(provider.count({ text: "y".repeat(10_000) }))
      assert.instanceOf(error, InvalidRequest)
      assert.include(error.reason, "4096")
      const storeError = yield* Effect.flip(store.activate("z".repeat(10_000)))
      assert.instanceOf(storeError, MessageTooLarge)
      assert.strictEqual((yield* provider.count({ text: "fits" })).tokens, 4)
    }))

  it.scoped("an oversized frame that names no request: a notice naming the limit, and that connection only is closed", () =>
    Effect.gen(function*() {
      const { socketPath } = yield* serve({ maxMessageBytes: 1024 })
      const raw = yield* rawConnect(socketPath)
      const other = yield* rawConnect(socketPath)
      yield* raw.write(Buffer.alloc(4096, 0x41))
      const notice = yield* raw.next
      assert.strictEqual(notice._tag, "Defect")
      assert.deepInclude(notice.defect, { _tag: "MessageTooLarge", limit: 1024 })
      yield* Deferred.await(raw.closed)
      yield* countIsServed(other, "1")
    }))

  it.scoped("in-flight limit: the extra request gets TooManyRequests, the others keep streaming, and a slot frees when one ends", () =>
    Effect.gen(function*() {
      const { control, socketPath } = yield* serve({ maxInFlightPerConnection: 2 })
      const { provider, store } = yield* connect(socketPath)
      const streams = yield* Effect.forEach([0, 1], () =>
        Effect.fork(Stream.runCollect(provider.generate({ messages: [], maxTokens: 1 }))))
      const generations = [yield* Queue.take(control.generations), yield* Queue.take(control.generations)]
      const refused = yield* Effect.flip(provider.count({ text: "a" }))
      assert.instanceOf(refused, EngineUnavailable)
      assert.include(refused.reason, "limit of 2 requests in flight")
      assert.instanceOf(yield* Effect.flip(store.list), TooManyRequests)
      // Another connection is not limited by this one.
      const other = yield* connect(socketPath)
      assert.strictEqual((yield* other.provider.count({ text: "abc" })).tokens, 3)
      // The two streams still work; when one ends, a new request fits.
      for (const generation of generations) {
        yield* generation.offer(text("t"))
        yield* generation.offer(done)
        yield* generation.offer({ _tag: "End" })
      }
      for (const fiber of streams) assert.strictEqual((yield* Fiber.join(fiber)).length, 2)
      assert.strictEqual((yield* provider.count({ text: "abcd" })).tokens, 4)
    }))

  it.scoped("in-flight limit on a raw connection: TooManyRequests names the limit", () =>
    Effect.gen(function*() {
      const { control, socketPath } = yield* serve({ maxInFlightPerConnection: 1 })
      const raw = yield* rawConnect(socketPath)
      yield* raw.send(request("1", "Generate", { messages: [], maxTokens: 1 }))
      const generation = yield* Queue.take(control.generations)
      yield* raw.send(request("2", "Count", { text: "a" }))
      assert.deepStrictEqual(failureOf(yield* raw.exitOf("2"))?.error, { _tag: "TooManyRequests", limit: 1 })
      yield* generation.offer({ _tag: "End" })
      assert.deepStrictEqual((yield* raw.exitOf("1")).exit, { _tag: "Success" })
      yield* countIsServed(raw, "3")
    }))

  it.scoped("in-flight limit per connection: two connections, each at its own cap, are refused and freed independently", () =>
    Effect.gen(function*() {
      const { control, socketPath } = yield* serve({ maxInFlightPerConnection: 1 })
      const first = yield* rawConnect(socketPath)
      const second = yield* rawConnect(socketPath)
      // The same request id on both: the count is the connection's, not the id's.
      yield* first.send(request("1", "Generate", { messages: [], maxTokens: 1 }))
      const firstGeneration = yield* Queue.take(control.generations)
      yield* second.send(request("1", "Generate", { messages: [], maxTokens: 1 }))
      const secondGeneration = yield* Queue.take(control.generations)
      for (const raw of [first, second]) {
        yield* raw.send(request("2", "Count", { text: "a" }))
        assert.deepStrictEqual(failureOf(yield* raw.exitOf("2"))?.error, { _tag: "TooManyRequests", limit: 1 })
      }
      // The first connection's stream ends: its slot frees, the second stays at its cap.
      yield* firstGeneration.offer({ _tag: "End" })
      assert.deepStrictEqual((yield* first.exitOf("1")).exit, { _tag: "Success" })
      yield* countIsServed(first, "3")
      yield* second.send(request("3", "Count", { text: "a" }))
      assert.deepStrictEqual(failureOf(yield* second.exitOf("3"))?.error, { _tag: "TooManyRequests", limit: 1 })
      // An interrupted stream frees its slot too.
      yield* second.send({ _tag: "Interrupt", requestId: "1" })
      yield* Deferred.await(secondGeneration.ended)
      assert.isDefined(failureOf(yield* second.exitOf("1")))
      yield* countIsServed(second, "4")
    }))
})
