import { assert, describe, layer } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import { Provider } from "../../src/services/Provider.js"
import { runtimeLayer } from "../support/engine.js"

describe("Provider smoke", () => {
  layer(runtimeLayer(), { timeout: 120_000, excludeTestServices: true })("runtime", (it) => {
    it.effect("generates, decides, counts, reports readiness", () =>
      Effect.gen(function*() {
        const provider = yield* Provider
        const chunks = Chunk.toArray(yield* Stream.runCollect(provider.generate({ messages: [{ role: "user", content: "hello there" }], maxTokens: 8 })))
        console.log(JSON.stringify(chunks))
        const d = yield* provider.decide({ prompt: "is it good?", heads: [{ name: "h", labels: ["yes", "no"] }] })
        console.log(JSON.stringify(d))
        const c = yield* provider.count({ messages: [{ role: "user", content: "hello there" }] })
        console.log(JSON.stringify(c))
        console.log(JSON.stringify(yield* provider.readiness, null, 1))
        assert.strictEqual(chunks.at(-1)?._tag, "Done")
      }))
  })
})
