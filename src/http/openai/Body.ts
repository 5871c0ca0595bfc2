/**
 * The request body as JSON: a body that is not JSON is a 400 naming it. Minimal on purpose: the
 * server's shared body reader (size limit, content type) replaces it when both are merged.
 */
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as Effect from "effect/Effect"
import { badRequest } from "../Refusals.js"
import { Refused } from "./Refused.js"

export const readJson = (request: HttpServerRequest.HttpServerRequest): Effect.Effect<unknown, Refused> =>
  Effect.mapError(
    request.json,
    () => new Refused({ refusal: badRequest("the request body is not valid JSON", null, "invalid_json") })
  )
