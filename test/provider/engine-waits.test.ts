/**
 * How long a request waits for the engine, with a real engine child. During a repair that takes
 * long (the replacement's model load hangs), every Provider call (generate, decide, count,
 * tokenize, prepare) waits at most the scheduler's queue timeout in all, rendering and tokenizing
 * included, then fails with QueueTimeout naming the engine's state; a worker that has given up
 * (restart budget exhausted) refuses them at once with EngineUnavailable.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Fiber from "effect/Fiber"
import * as Stream from "effect/Stream"
import type { ChatMessage, GenerateRequest } from "../../src/domain/Inference.js"
import { failpointsEnv } from "../../src/native/Failpoints.js"
import { Admission } from "../../src/services/Admission.js"
import { NativeWorker, type WorkerReadiness } from "../../src/services/NativeWorker.js"
import { Provider } from "../../src/services/Provider.js"
import type { ProviderError } from "../../src/services/ProviderError.js"
import { Scheduler } from "../../src/services/Scheduler.js"
import { runtimeLayer } from "../support/engine.js"
import { awaitGone } from "../support/processes.js"
import { awaitReadiness } from "../support/engine.js"

const QUEUE_TIMEOUT_MILLIS = 2000
/** Time a refusal may take beyond its limit (timers, a loaded machine). */
const SLACK_MILLIS = 3000

const messages: ReadonlyArray<ChatMessage> = [{ role: "user", content: "are you there?" }]
const ask: GenerateRequest = { messages, maxTokens: 3, sampling: { temperature: 0 } }

/** Kills the serving child and waits until the worker is in a state `until` accepts. */
const killChild = (until: (r: WorkerReadiness) => boolean) =>
  Effect.gen(function*() {
    const worker = yield* NativeWorker
    const before = yield* worker.readiness
    assert.strictEqual(before.state, "ready")
    process.kill(before.pid!, "SIGKILL")
    yield* awaitGone(before.pid!)
    return yield* awaitReadiness((r) => r.incarnation > before.incarnation && until(r))
  })

/** Every Provider call, each ending with its error (or failing the test if it succeeds). */
const everyCall = Effect.gen(function*() {
  const provider = yield* Provider
  const calls: ReadonlyArray<readonly [string, Effect.Effect<unknown, ProviderError>]> = [
    ["generate", Stream.runDrain(provider.generate(ask))],
    ["generate in a conversation", Stream.runDrain(provider.generate({ ...ask, conversation: "waits" }))],
    ["generate a plain prompt", Stream.runDrain(provider.generate({ messages: [], prompt: "once upon", maxTokens: 3 }))],
    ["decide", provider.decide({ prompt: messages, heads: [{ name: "here", labels: ["yes", "no"] }] })],
    ["decide on text", provider.decide({ prompt: "are you there?", heads: [{ name: "here", labels: ["yes", "no"] }] })],
    ["count", provider.count({ messages })],
    ["tokenize", provider.tokenize({ text: "are you there?" })],
    ["prepare", provider.prepare({ conversation: "prepared", prefix: [], history: messages })]
  ]
  return yield* Effect.forEach(calls, ([name, call]) =>
    Effect.gen(function*() {
      const start = yield* Clock.currentTimeMillis
      // The bound that makes a request that waits too long fail the test instead of hanging it.
      const outcome = yield* call.pipe(
        Effect.either,
        Effect.timeoutFail({
          duration: Duration.millis(QUEUE_TIMEOUT_MILLIS + SLACK_MILLIS),
          onTimeout: () => new Error(`${name} still waiting after ${QUEUE_TIMEOUT_MILLIS + SLACK_MILLIS} ms`)
        })
      )
      const elapsed = (yield* Clock.currentTimeMillis) - start
      if (Either.isRight(outcome)) return assert.fail(`${name} succeeded while the engine was down`)
      return { name, error: outcome.left, elapsed }
    }), { concurrency: "unbounded" })
})

/** Nothing admitted is left: no running or queued request, no workspace lease. */
const assertIdle = Effect.gen(function*() {
  const scheduler = yield* (yield* Scheduler).status
  const admission = yield* (yield* Admission).status
  assert.deepStrictEqual([scheduler.running, scheduler.queued], [0, 0], "scheduler idle")
  assert.strictEqual(admission.byKind.workspace.count, 0, "no workspace lease")
})

describe("waiting for the engine", () => {
  // The replacement child (incarnation 2) never finishes loading: the repair outlasts every wait.
  layer(
    runtimeLayer({
      scheduler: { queueTimeout: Duration.millis(QUEUE_TIMEOUT_MILLIS) },
      worker: {
        childEnv: failpointsEnv("hangDuringLoad@2"),
        loadDeadline: Duration.minutes(5),
        readyTimeout: Duration.minutes(5)
      }
    }),
    { timeout: 120_000, excludeTestServices: true }
  )("a repair that outlasts the queue timeout", (it) => {
    it.effect("every call fails with QueueTimeout within the queue timeout, naming the engine's state", () =>
      Effect.gen(function*() {
        const repairing = yield* killChild((r) => r.state === "loading")
        assert.include(repairing.reason ?? "", "SIGKILL", "the repair says what it repairs")
        const outcomes = yield* everyCall
        for (const { elapsed, error, name } of outcomes) {
          assert.strictEqual(error._tag, "QueueTimeout", `${name}: ${error.message}`)
          if (error._tag !== "QueueTimeout") continue
          assert.strictEqual(error.waitedMillis, QUEUE_TIMEOUT_MILLIS, name)
          assert.include(error.reason, "a ready engine", name)
          assert.include(error.reason, "loading", name)
          assert.include(error.reason, "SIGKILL", name)
          assert.isAtLeast(elapsed, QUEUE_TIMEOUT_MILLIS - 50, name)
          assert.isBelow(elapsed, QUEUE_TIMEOUT_MILLIS + SLACK_MILLIS, name)
        }
        yield* assertIdle
      }))
  })

  // The queue timeout counts from submission: what a request spent before its queue is not given again.
  layer(
    runtimeLayer({ scheduler: { slots: 1, anonymousSlots: 1, queueTimeout: Duration.millis(QUEUE_TIMEOUT_MILLIS) } }),
    { timeout: 120_000, excludeTestServices: true }
  )("one conversation slot", (it) => {
    it.effect("a request submitted earlier waits for its slot only for what is left of its queue timeout", () =>
      Effect.gen(function*() {
        const provider = yield* Provider
        const scheduler = yield* Scheduler
        const started = yield* Effect.makeLatch(false)
        const holder = yield* provider.generate({ ...ask, messages: [{ role: "user", content: "hold the slot" }], maxTokens: 3000, conversation: "holder" }).pipe(
          Stream.tap(() => started.open),
          Stream.runDrain,
          Effect.fork
        )
        yield* started.await
        const spent = 1500
        const start = yield* Clock.currentTimeMillis
        const error = yield* Effect.scoped(
          scheduler.generation({ lane: "foreground", label: "late", conversation: "late", submittedAt: start - spent })
        ).pipe(Effect.flip)
        const elapsed = (yield* Clock.currentTimeMillis) - start
        assert.strictEqual(error._tag, "QueueTimeout")
        if (error._tag === "QueueTimeout") {
          assert.strictEqual(error.reason, "waiting for a slot")
          assert.strictEqual(error.waitedMillis, QUEUE_TIMEOUT_MILLIS)
        }
        // Before the rest of its timeout ran out, well before a whole timeout.
        assert.isAtLeast(elapsed, QUEUE_TIMEOUT_MILLIS - spent - 50)
        assert.isBelow(elapsed, QUEUE_TIMEOUT_MILLIS - 200)
        yield* Fiber.interrupt(holder)
        yield* assertIdle
      }))
  })

  // One failure is tolerated, the second exhausts the budget: the replacement crashes while loading.
  layer(
    runtimeLayer({
      scheduler: { queueTimeout: Duration.millis(QUEUE_TIMEOUT_MILLIS) },
      worker: {
        childEnv: failpointsEnv("crashDuringLoad@2,3,4"),
        restartIntensity: 1,
        restartPeriod: Duration.minutes(10),
        restartBackoff: Duration.minutes(10)
      }
    }),
    { timeout: 120_000, excludeTestServices: true }
  )("a worker that has given up", (it) => {
    it.effect("every call fails at once with EngineUnavailable and the reason", () =>
      Effect.gen(function*() {
        const failed = yield* killChild((r) => r.state === "failed")
        assert.include(failed.reason ?? "", "restart budget exhausted")
        const outcomes = yield* everyCall
        for (const { elapsed, error, name } of outcomes) {
          assert.strictEqual(error._tag, "EngineUnavailable", `${name}: ${error.message}`)
          assert.include(error.message, "restart budget exhausted", name)
          assert.isBelow(elapsed, 1000, name)
        }
        yield* assertIdle
        // Still failed: nothing above waited for (or started) another child.
        assert.strictEqual((yield* (yield* NativeWorker).readiness).state, "failed")
      }))
  })
})
