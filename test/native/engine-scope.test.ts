/**
 * The engine's native resources live in its scope: closing the scope ends an open generation and
 * disposes the resident model, its context and the llama; unloading a role forgets the
 * generations on its sequences (the seam between engine/Residents and engine/Generation). In
 * process, composed as Engine.make composes them, on the tiny model (1 thread, a small context).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import { ensureModel } from "../../fixtures/models.js"
import * as Generation from "../../src/native/engine/Generation.js"
import * as Llama from "../../src/native/engine/Llama.js"
import * as Residents from "../../src/native/engine/Residents.js"

/** The llama, resident models and generations, built in the current scope in Engine.make's order. */
const build = Effect.gen(function*() {
  const native = yield* Llama.make({ backend: "cpu", threads: 1, batchSize: 64 })
  const residents = yield* Residents.make(native, undefined)
  const generations = yield* Generation.make(native, residents, undefined)
  return { native, residents, generations }
})

const loadTiny = (residents: Residents.Residents) =>
  Stream.runDrain(residents.load("generation", ensureModel("tiny"), 256, 1))

const begin = (generations: Generation.Generations, generationId: string, prompt: ReadonlyArray<number>) =>
  generations.begin({
    generationId,
    lane: "foreground",
    sequence: 0,
    prompt,
    sampling: { temperature: 0 },
    maxTokens: 8,
    stopTokens: [],
    prefillChunk: 64
  })

describe("engine scope", () => {
  it.scoped("closing the scope ends the open generation and disposes the model, its context and the llama", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      // Closed by the test; also by the test's own scope where the test fails first (a second close does nothing).
      yield* Effect.addFinalizer(() => Scope.close(scope, Exit.void))
      const { generations, native, residents } = yield* Scope.extend(build, scope)
      yield* loadTiny(residents)
      const resident = yield* residents.resident("generation")
      const prompt = yield* residents.tokenize("generation", "hello there", false)
      yield* begin(generations, "open", prompt)
      // Two tokens decoded; the generation stays open (its evaluation mid-way) when the scope closes.
      const tokens = yield* generations.advance("open", 0).pipe(
        Stream.filter((e) => e._tag === "Token"),
        Stream.take(2),
        Stream.runCollect
      )
      assert.strictEqual(Chunk.size(tokens), 2)
      assert.isFalse(resident.model.disposed)
      yield* Scope.close(scope, Exit.void)
      assert.isTrue(resident.sequences[0]!.disposed, "sequence")
      assert.isTrue(resident.context.disposed, "context")
      assert.isTrue(resident.model.disposed, "model")
      assert.isTrue(native.llama.disposed, "llama")
      // Disposed through the engine's own finalizers, not only as a side effect of the llama's dispose.
      assert.strictEqual((yield* Effect.flip(residents.resident("generation")))._tag, "RoleNotLoaded")
      assert.strictEqual((yield* Effect.flip(Stream.runDrain(generations.advance("open", 0))))._tag, "UnknownGeneration")
    }))

  it.scoped("unloading a role forgets its generations: advance is UnknownGeneration, and the reloaded sequence is idle", () =>
    Effect.gen(function*() {
      const { generations, residents } = yield* build
      yield* loadTiny(residents)
      const prompt = yield* residents.tokenize("generation", "hello there", false)
      yield* begin(generations, "first", prompt)
      yield* residents.unload("generation")
      const unknown = yield* Stream.runDrain(generations.advance("first", 0)).pipe(Effect.flip)
      assert.strictEqual(unknown._tag, "UnknownGeneration")
      yield* loadTiny(residents)
      const { reusedTokens } = yield* begin(generations, "second", prompt)
      assert.strictEqual(reusedTokens, 0)
      const events = yield* Stream.runCollect(generations.advance("second", 0))
      assert.strictEqual(Chunk.toReadonlyArray(events).at(-1)?._tag, "Finished")
    }))
})
