import { assert, describe, it } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import { NativeWorker } from "../src/services/NativeWorker.js"
import { workerLayer } from "./support/engine.js"

describe("NativeWorker", () => {
  it.layer(workerLayer(), { timeout: 120_000 })((it) => {
    it.effect("generates greedily from rendered chat tokens", () =>
      Effect.gen(function*() {
        const worker = yield* NativeWorker
        const prompt = yield* worker.render("generation", [{ role: "user", content: "hello there" }])
        const events = yield* Stream.runCollect(
          worker.generate({ prompt, maxTokens: 8, sampling: { temperature: 0 } })
        )
        const tokens = Chunk.toArray(events).filter((e) => e._tag === "Token")
        assert.strictEqual(tokens.length, 8)
        const ready = yield* worker.readiness
        assert.strictEqual(ready.state, "ready")
      }))
  })
})
