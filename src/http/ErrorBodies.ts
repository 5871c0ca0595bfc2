/**
 * A refusal as each API writes it: OpenAI's `{"error": {"message", "type", "param", "code"}}`
 * and Ollama's `{"error": "<message>"}`, with the status and, for 429 and 503, Retry-After.
 * What the server refuses before any route (the API key, the body size, the in-flight limit)
 * answers in the shape of the API the path belongs to (`forPath`).
 */
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import type { Refusal } from "./Refusals.js"

const headersOf = (refusal: Refusal) =>
  refusal.retryAfterSeconds === undefined ? {} : { "retry-after": String(refusal.retryAfterSeconds) }

export const openAi = (refusal: Refusal): HttpServerResponse.HttpServerResponse =>
  HttpServerResponse.unsafeJson(
    { error: { message: refusal.message, type: refusal.type, param: refusal.param, code: refusal.code } },
    { status: refusal.status, headers: headersOf(refusal) }
  )

export const ollama = (refusal: Refusal): HttpServerResponse.HttpServerResponse =>
  HttpServerResponse.unsafeJson({ error: refusal.message }, { status: refusal.status, headers: headersOf(refusal) })

/** Ollama's shape under `/api/`, OpenAI's everywhere else. */
export const forPath = (path: string, refusal: Refusal): HttpServerResponse.HttpServerResponse =>
  path === "/api" || path.startsWith("/api/") ? ollama(refusal) : openAi(refusal)
