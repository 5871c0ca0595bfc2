/**
 * OpenAI's API under pressure, with the official client (no retries): more concurrent streams than
 * one running and one queued request allow get 429 `queue_full` with Retry-After; while the
 * engine child is replaced after a SIGKILL, a request gets 503 `engine_unavailable` with
 * Retry-After, and once the replacement is ready requests are served again; a child killed
 * mid-stream ends the stream with one error event in OpenAI's shape (no `[DONE]`).
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Schedule from "effect/Schedule"
import * as Stream from "effect/Stream"
import OpenAI from "openai"
import { client, refusalOf } from "./openai-support.js"
import { HttpTest } from "./support.js"

const MODEL = "qwen-chat"
const greeting = [{ role: "user" as const, content: "Hi there" }]

/** A generation that runs until max tokens: an unbounded string under a grammar. */
const long = {
  model: MODEL,
  messages: greeting,
  max_tokens: 4000,
  stream: true as const,
  response_format: {
    type: "json_schema" as const,
    json_schema: { name: "long", schema: { type: "object", properties: { text: { type: "string" } } } }
  }
}

/** Polls readiness until `until` holds (real time, bounded). */
const awaitReadiness = (until: (r: Effect.Effect.Success<HttpTest["Type"]["provider"]["readiness"]>) => boolean) =>
  Effect.flatMap(HttpTest, ({ provider }) =>
    provider.readiness.pipe(
      Effect.filterOrFail(until),
      Effect.retry({ schedule: Schedule.spaced("20 millis") }),
      Effect.timeoutFail({ duration: "30 seconds", onTimeout: () => new Error("readiness never reached the expected state") })
    ))

describe("OpenAI API: limits", () => {
  // One anonymous sequence; the one conversation slot is owned first, so requests without a
  // conversation cannot borrow it.
  layer(HttpTest.layer({ runtime: { scheduler: { slots: 1, anonymousSlots: 1, maxQueued: 1 } } }), { timeout: 180_000, excludeTestServices: true })((it) => {
    it.effect("a full queue is 429 queue_full with Retry-After; the running and queued streams are unaffected", () =>
      Effect.gen(function*() {
        const openai = yield* client
        const { config } = yield* HttpTest
        // Each stream is aborted when its fiber is interrupted (the signal Effect.promise passes).
        const stream = (signal: AbortSignal) => openai.chat.completions.create(long, { signal })
        yield* Stream.runDrain((yield* HttpTest).provider.generate({ messages: [{ role: "user", content: "own the slot" }], maxTokens: 1, conversation: "owner" }))
        const running = yield* Effect.fork(Effect.promise(async (signal) => {
          const chunks = (await stream(signal))[Symbol.asyncIterator]()
          await chunks.next()
          await new Promise((resolve) => signal.addEventListener("abort", resolve))
        }))
        yield* awaitReadiness((r) => r.scheduler.running === 1)
        const queued = yield* Effect.fork(Effect.promise(stream))
        yield* awaitReadiness((r) => r.scheduler.queued === 1)
        const full = yield* refusalOf(() => openai.chat.completions.create(long))
        assert.deepStrictEqual([full.status, full.code, full.type], [429, "queue_full", "rate_limit_error"])
        assert.strictEqual(full.headers.get("retry-after"), String(config.retryAfterSeconds))
        const { provider } = yield* HttpTest
        const { queued: stillQueued, running: stillRunning } = (yield* provider.readiness).scheduler
        assert.deepStrictEqual([stillRunning, stillQueued], [1, 1])
        yield* Fiber.interrupt(queued)
        yield* Fiber.interrupt(running)
        yield* awaitReadiness((r) => r.scheduler.running === 0 && r.scheduler.queued === 0)
      }))

    it.effect("while the engine is repaired after a SIGKILL, a request is 503 engine_unavailable with Retry-After", () =>
      Effect.gen(function*() {
        const { config, provider } = yield* HttpTest
        const before = yield* provider.readiness
        const subscribed = yield* Deferred.make<void>()
        const repairing = yield* provider.readinessChanges.pipe(
          Stream.tap(() => Deferred.succeed(subscribed, undefined)),
          Stream.filter((r) => r.state === "repairing"),
          Stream.runHead,
          Effect.fork
        )
        yield* Deferred.await(subscribed)
        process.kill(before.engine.pid!, "SIGKILL")
        yield* Fiber.join(repairing)
        const unavailable = yield* refusalOf((openai) => openai.chat.completions.create({ model: MODEL, messages: greeting, max_tokens: 16 }))
        assert.deepStrictEqual([unavailable.status, unavailable.code], [503, "engine_unavailable"])
        assert.strictEqual(unavailable.headers.get("retry-after"), String(config.retryAfterSeconds))
        // The replacement may already be starting: any state but ready is refused the same way.
        assert.match(unavailable.message, /the engine is (repairing|starting|loading|warming)/)
        const after = yield* awaitReadiness((r) => r.state === "ready")
        assert.isAbove(after.engine.incarnation, before.engine.incarnation)
        const openai = yield* client
        const served = yield* Effect.promise(() => openai.chat.completions.create({ model: MODEL, messages: greeting, max_tokens: 64 }))
        assert.include(served.choices[0]?.message.content ?? "", "Hello!")
      }))

    it.effect("a failure mid-stream (the child SIGKILLed) is one error event in OpenAI's shape, and the stream ends without [DONE]", () =>
      Effect.gen(function*() {
        const { baseUrl } = yield* HttpTest
        const before = yield* awaitReadiness((r) => r.state === "ready")
        const events = yield* Effect.promise(async () => {
          const response = await fetch(`${baseUrl}/v1/chat/completions`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify(long)
          })
          const reader = response.body!.getReader()
          const decoder = new TextDecoder()
          let text = decoder.decode((await reader.read()).value)
          process.kill(before.engine.pid!, "SIGKILL")
          for (let part = await reader.read(); !part.done; part = await reader.read()) text += decoder.decode(part.value)
          return { status: response.status, text }
        })
        assert.strictEqual(events.status, 200)
        const datas = events.text.split("\n\n").filter((e) => e.startsWith("data: ")).map((e) => e.slice("data: ".length))
        assert.notInclude(datas, "[DONE]")
        const last = JSON.parse(datas.at(-1)!) as { error: { type: string; code: string; message: string } }
        assert.deepStrictEqual([last.error.type, last.error.code], ["unavailable_error", "engine_failed"])
        // With the official client, the error event is thrown as an APIError.
        const replaced = yield* awaitReadiness((r) => r.state === "ready")
        const thrown = yield* Effect.flatMap(client, (openai) =>
          Effect.promise(async () => {
            const stream = await openai.chat.completions.create(long)
            const chunks = stream[Symbol.asyncIterator]()
            await chunks.next()
            process.kill(replaced.engine.pid!, "SIGKILL")
            try {
              for (let next = await chunks.next(); !next.done; next = await chunks.next());
              return undefined
            } catch (error) {
              return error
            }
          }))
        assert(thrown instanceof OpenAI.APIError, `an APIError, not ${String(thrown)}`)
        assert.strictEqual(thrown.code, "engine_failed")
        yield* awaitReadiness((r) => r.state === "ready")
      }))
  })
})
