/** The health check answers from the engine's readiness, as llama.cpp's server does. */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { httpServer } from "./support.js"

describe("HTTP health", () => {
  it.scoped("GET /health is 200 ok once the engine is ready", () =>
    Effect.gen(function*() {
      const { baseUrl } = yield* httpServer()
      const response = yield* Effect.promise(() => fetch(`${baseUrl}/health`))
      assert.strictEqual(response.status, 200)
      assert.deepStrictEqual(yield* Effect.promise(() => response.json()), { status: "ok" })
    }), 120_000)
})
