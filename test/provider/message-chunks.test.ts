/**
 * The Provider's stream keeps a message from the engine whole: the tokens that reached the host
 * while its reader was busy come out as one chunk of the stream (what the RPC server sends as one
 * message), in order and each once, and the output is the same as a reader that keeps up. Real
 * inference on the tiny model; the reader is slow in real time, which is the point.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import type { GenerateChunk, GenerateRequest } from "../../src/domain/Inference.js"
import { Provider } from "../../src/services/Provider.js"
import { runtimeLayer } from "../support/engine.js"

const request: GenerateRequest = {
  messages: [{ role: "user", content: "tell me a story" }],
  maxTokens: 32,
  sampling: { temperature: 0 }
}

const tokensOf = (chunks: ReadonlyArray<GenerateChunk>) => chunks.flatMap((c) => (c._tag === "Text" ? c.tokens : []))

describe("the Provider's stream chunks", () => {
  layer(runtimeLayer(), { timeout: 120_000, excludeTestServices: true })((it) => {
    it.scoped("a reader that falls behind gets the tokens decoded meanwhile in one chunk, in order", () =>
      Effect.gen(function*() {
        const provider = yield* Provider
        const cold = Chunk.toReadonlyArray(yield* Stream.runCollect(provider.generate(request)))
        const pull = yield* Stream.toPull(provider.generate(request))
        const pulls: Array<ReadonlyArray<GenerateChunk>> = []
        for (;;) {
          const next = yield* Effect.option(pull)
          if (Option.isNone(next)) break
          pulls.push(Chunk.toReadonlyArray(next.value))
          // A slow reader: the engine goes on decoding while it is busy.
          yield* Effect.sleep("100 millis")
        }
        // The tiny model has no channels: each token's output is at most one Text chunk.
        const texts = pulls.map((chunks) => chunks.filter((c) => c._tag === "Text").length)
        assert.isAtLeast(Math.max(...texts), 2, `Text chunks per pull: ${texts.join(" ")}`)
        assert.deepStrictEqual(tokensOf(pulls.flat()), tokensOf(cold))
        const done = pulls.flat().at(-1)
        assert.strictEqual(done?._tag, "Done")
        assert.strictEqual(done?._tag === "Done" ? done.usage.generatedTokens : -1, tokensOf(cold).length)
      }))

    it.scoped("the message that ends the output carries Done with its last Text: the answer is whole before the stream closes", () =>
      Effect.gen(function*() {
        const provider = yield* Provider
        const pulls = Chunk.toReadonlyArray(yield* Stream.runCollect(Stream.chunks(provider.generate({ ...request, maxTokens: 4 }))))
        const last = Chunk.toReadonlyArray(pulls.at(-1) ?? Chunk.empty<GenerateChunk>())
        const done = last.at(-1)
        assert.strictEqual(done?._tag, "Done")
        assert.strictEqual(done?._tag === "Done" ? done.stopReason : undefined, "maxTokens")
        // The fourth token and Done: one chunk (one RPC message), not Done alone after it.
        assert.isTrue(last.some((c) => c._tag === "Text"), `chunks of the last pull: ${last.map((c) => c._tag).join(" ")}`)
      }))
  })
})
