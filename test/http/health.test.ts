/** The health check answers from the engine's readiness, as llama.cpp's server does. */
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { HttpTest } from "./support.js"

describe("HTTP health", () => {
  layer(HttpTest.layer(), { timeout: 120_000 })((it) => {
    it.effect("GET /health is 200 ok once the engine is ready", () =>
      Effect.gen(function*() {
        const { baseUrl } = yield* HttpTest
        const response = yield* Effect.promise(() => fetch(`${baseUrl}/health`))
        assert.strictEqual(response.status, 200)
        assert.deepStrictEqual(yield* Effect.promise(() => response.json()), { status: "ok" })
      }))
  })
})
