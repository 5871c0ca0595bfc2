/**
 * A Begin never waits for the engine: it reckons what the sequence keeps and answers, and the
 * generation's first step trims the sequence. So a request submitted while another step holds the
 * engine waits at the step gate once (for its first step), not twice; with its Begin carried by
 * the first Advance (one request), Started comes in that first step's message. Shown in process,
 * as Engine.make composes the engine, on the tiny model, with a step that holds the gate until the
 * test lets it go.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Stream from "effect/Stream"
import { ensureModel } from "../../fixtures/models.js"
import * as Generation from "../../src/native/engine/Generation.js"
import * as Llama from "../../src/native/engine/Llama.js"
import * as Residents from "../../src/native/engine/Residents.js"

describe("Begin and the step gate", () => {
  it.scoped("a generation set up while another step holds the engine is begun at once and waits at the gate once", () =>
    Effect.gen(function*() {
      const native = yield* Llama.make({ backend: "cpu", threads: 1, batchSize: 64 })
      const residents = yield* Residents.make(native, undefined)
      const generations = yield* Generation.make(native, residents, undefined)
      yield* Stream.runDrain(residents.load("generation", ensureModel("tiny"), 256, 2))
      const prompt = yield* residents.tokenize("generation", "once upon a time", false)
      // A step that holds the engine until released.
      const entered = yield* Deferred.make<void>()
      let release = () => {}
      const released = new Promise<void>((resolve) => (release = resolve))
      const holding = yield* Effect.fork(native.step("hold", () => {
        Deferred.unsafeDone(entered, Effect.void)
        return released
      }))
      yield* Deferred.await(entered)
      const request = (generationId: string, sequence: number) =>
        ({ generationId, sequence, prompt, sampling: { temperature: 0 }, maxTokens: 2, prefillChunk: 64 }) as const
      // Begin alone answers although the engine is held.
      assert.deepStrictEqual(yield* generations.begin(request("alone", 0)), { reusedTokens: 0 })
      // Begin with the first Advance: nothing comes while the engine is held, then Started and the first step together.
      const pull = yield* Stream.toPull(generations.start(request("started", 1)))
      const first = yield* Effect.fork(pull)
      assert.isNull(yield* Fiber.poll(first).pipe(Effect.map((o) => (o._tag === "Some" ? o.value : null))))
      release()
      yield* Fiber.join(holding)
      const events = Chunk.toReadonlyArray(yield* Fiber.join(first))
      assert.deepStrictEqual(events.map((e) => e._tag), ["Started", "Prefilled"])
      assert.deepStrictEqual(events[0], { _tag: "Started", reusedTokens: 0 })
      // (Ending closes the evaluation: a step, so only once the engine is free.)
      yield* generations.end("alone")
    }))
})
