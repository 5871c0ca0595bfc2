/**
 * The refusals the server makes itself, before or around any route, in the shared classification
 * (Refusals.ts): a request from another site's web page, a missing or wrong API key, a body over
 * the size limit, and one request more than the in-flight limit. Each names the limit and the setting that raises it.
 */
import type { Refusal } from "./Refusals.js"

/** Why a request's key was not accepted. */
export type KeyVerdict = "missing" | "wrong"

export const unauthorized = (verdict: KeyVerdict): Refusal => ({
  status: 401,
  type: "authentication_error",
  code: "invalid_api_key",
  param: null,
  message: verdict === "missing"
    ? "this server needs an API key: send it as `Authorization: Bearer <key>`"
    : "the API key is not valid"
})

/** A browser sent the request for a page of another origin (cross-site request forgery). */
export const crossOrigin = (origin: string): Refusal => ({
  status: 403,
  type: "permission_error",
  code: "cross_origin",
  param: null,
  message: `requests from web pages of other origins are refused (Origin ${origin}): ` +
    "only the server's own pages (the console) may call it from a browser"
})

/** `size`: the body's length (declared, or counted when it was sent without one). */
export const bodyTooLarge = (limit: number, size: number): Refusal => ({
  status: 413,
  type: "invalid_request_error",
  code: "body_too_large",
  param: null,
  message: `the request body of ${size} bytes is over the limit of ${limit} bytes ` +
    "(NATIVEGEN_HTTP_MAX_BODY_BYTES)"
})

export const tooManyRequests = (limit: number, retryAfterSeconds: number): Refusal => ({
  status: 429,
  type: "rate_limit_error",
  code: "too_many_requests",
  param: null,
  message: `the server is already handling its limit of ${limit} requests (NATIVEGEN_HTTP_MAX_IN_FLIGHT); ` +
    `retry after ${retryAfterSeconds} s`,
  retryAfterSeconds
})
