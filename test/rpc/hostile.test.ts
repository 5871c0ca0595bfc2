/**
 * Hostile socket input (issue 12, item 18) that once stopped the server serving others or held
 * its resources: values nested deep enough to overflow the stack where their decoding error is
 * printed, a stream whose client never acks (it held a generation and its engine slot forever),
 * a client that never reads (its responses piled up to 16 MiB), and a client that half-closes its
 * socket (no fix was needed: it is kept as a check). Each time the offender gets a typed error naming the limit, or loses its connection,
 * its work is cancelled and other connections are served. (With the real engine: e2e.test.ts.)
 */
import { assert, describe, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Queue from "effect/Queue"
import * as TestClock from "effect/TestClock"
import { connect as rawConnect, countIsServed, failureOf, request } from "./support/RawClient.js"
import { serve } from "./support/serve.js"
import * as TestProvider from "./support/TestProvider.js"



const nested = (depth: number) => "[".repeat(depth) + "]".repeat(depth)

describe("hostile input", () => {
  it.scoped("values nested deeper than the limit: the request fails with MessageTooDeep, a frame naming no request closes its connection; the server keeps serving", () =>
    Effect.gen(function*() {
      const { socketPath } = yield* serve()
      const raw = yield* rawConnect(socketPath)
      const other = yield* rawConnect(socketPath)
      // In the payload (decoded by the RPC server) and in the envelope (decoded by the protocol).
      yield* raw.write(`{"_tag":"Request","id":"1","tag":"Count","payload":{"text":${nested(100_000)}}}\n`)
      assert.deepStrictEqual(failureOf(yield* raw.exitOf("1"))?.error, { _tag: "MessageTooDeep", limit: 64 })
      yield* raw.write(`{"_tag":"Request","id":"2","tag":"Count","payload":{},"headers":${nested(100_000)}}\n`)
      assert.deepStrictEqual(failureOf(yield* raw.exitOf("2"))?.error, { _tag: "MessageTooDeep", limit: 64 })
      // Brackets inside strings are text, not nesting.
      yield* raw.send(request("3", "Count", { text: "[".repeat(1000) }))
      assert.deepInclude((yield* raw.exitOf("3")).exit, { _tag: "Success", value: { role: "generation", tokens: 1000, admittedContext: 4096 } })
      yield* countIsServed(raw, "4")
      yield* other.write(`${nested(100_000)}\n`)
      const notice = yield* other.next
      assert.deepStrictEqual(notice.defect, { _tag: "MessageTooDeep", limit: 64 })
      yield* Deferred.await(other.closed)
      yield* countIsServed(raw, "5")
    }))

  it.scoped("a stream whose client takes no chunk is cancelled after the ack timeout with AckTimeout; one whose client acks goes on", () =>
    Effect.gen(function*() {
      const { control, socketPath } = yield* serve({ ackTimeout: Duration.seconds(30), idleTimeout: Duration.hours(1) })
      const stalled = yield* rawConnect(socketPath)
      yield* stalled.send(request("1", "Generate", { messages: [], maxTokens: 1 }))
      const stalledGeneration = yield* Queue.take(control.generations)
      const reading = yield* rawConnect(socketPath)
      yield* reading.send(request("1", "Generate", { messages: [], maxTokens: 1 }))
      const readGeneration = yield* Queue.take(control.generations)
      yield* stalledGeneration.offer(TestProvider.text("a"))
      yield* stalledGeneration.offer(TestProvider.text("b"))
      assert.strictEqual((yield* stalled.next)._tag, "Chunk")
      for (let i = 0; i < 3; i++) {
        yield* readGeneration.offer(TestProvider.text("x"))
        assert.strictEqual((yield* reading.next)._tag, "Chunk")
        yield* TestClock.adjust("20 seconds")
        yield* reading.send({ _tag: "Ack", requestId: "1" })
      }
      // 60 seconds in: the unread stream was cancelled (its generation with it), the read one was not.
      assert.isTrue(Exit.isInterrupted(yield* Deferred.await(stalledGeneration.ended)))
      assert.deepStrictEqual(failureOf(yield* stalled.exitOf("1"))?.error, { _tag: "AckTimeout", timeoutMillis: 30_000 })
      assert.isFalse(yield* Deferred.isDone(readGeneration.ended))
      yield* readGeneration.offer({ _tag: "End" })
      assert.deepStrictEqual((yield* reading.exitOf("1")).exit, { _tag: "Success" })
      yield* countIsServed(stalled, "2")
    }))

  it.live("a client that never reads: past 2 MiB of unread responses its connection is closed and its generations cancelled; others are served", () =>
    Effect.gen(function*() {
      const { control, socketPath } = yield* serve()
      const raw = yield* rawConnect(socketPath)
      yield* raw.pause
      const big = "x".repeat(256 * 1024)
      const generations: Array<TestProvider.Generation> = []
      // Each stream has one unacked chunk out; sixteen of them are 4 MiB.
      for (let i = 0; i < 16; i++) {
        yield* raw.send(request(String(i), "Generate", { messages: [], maxTokens: 1 }))
        generations.push(yield* Queue.take(control.generations))
      }
      for (const generation of generations) yield* generation.offer(TestProvider.text(big))
      for (const generation of generations) assert.isTrue(Exit.isInterrupted(yield* Deferred.await(generation.ended)))
      const other = yield* rawConnect(socketPath)
      yield* countIsServed(other, "1")
    }).pipe(Effect.scoped))

  it.scoped("a client that half-closes its socket after a request: the request is cancelled, nothing is left running", () =>
    Effect.gen(function*() {
      const { control, socketPath } = yield* serve()
      const raw = yield* rawConnect(socketPath)
      yield* raw.send(request("1", "Generate", { messages: [], maxTokens: 1 }))
      const generation = yield* Queue.take(control.generations)
      yield* raw.end
      assert.isTrue(Exit.isInterrupted(yield* Deferred.await(generation.ended)))
      yield* Deferred.await(raw.closed)
      const other = yield* rawConnect(socketPath)
      yield* countIsServed(other, "1")
    }))
})
