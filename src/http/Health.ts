/**
 * `GET /health`, as llama.cpp's server answers it: 200 `{"status": "ok"}` when the engine is
 * ready, else 503 `{"status": <engine state>, "reason"}` with Retry-After.
 */
import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Effect from "effect/Effect"
import { Provider } from "../services/Provider.js"
import { HttpConfig } from "./HttpConfig.js"

export const routes = HttpLayerRouter.add(
  "GET",
  "/health",
  Effect.gen(function*() {
    const readiness = yield* (yield* Provider).readiness
    const { retryAfterSeconds } = yield* HttpConfig
    return readiness.state === "ready"
      ? HttpServerResponse.unsafeJson({ status: "ok" })
      : HttpServerResponse.unsafeJson({ status: readiness.state, reason: readiness.reason }, {
        status: 503,
        headers: { "retry-after": String(retryAfterSeconds) }
      })
  })
)
