/**
 * The API key check. A request presents its key as `Authorization: Bearer <key>` (OpenAI's
 * clients) or `x-api-key: <key>` (as llama-server also accepts); it is compared with the
 * configured key in constant time, over SHA-256 digests so that neither the key's length nor a
 * common prefix shows in the timing.
 */
import type * as Headers from "@effect/platform/Headers"
import * as Redacted from "effect/Redacted"
import * as Crypto from "node:crypto"
import type { KeyVerdict } from "./ServerRefusals.js"

const digest = (text: string) => Crypto.createHash("sha256").update(text, "utf8").digest()

/** The key a request presents, if any: a Bearer token first, else `x-api-key`. */
export const presented = (headers: Headers.Headers): string | undefined => {
  const authorization = headers["authorization"]
  if (authorization !== undefined) {
    const bearer = /^Bearer[ \t]+(.*)$/i.exec(authorization)
    // Another scheme (Basic, ...) presents no key we know how to read: the same as a wrong one.
    return bearer === null ? "" : bearer[1]!.trim()
  }
  return headers["x-api-key"]?.trim()
}

/** A check of requests' headers against `key`: accepted, or why not. */
export const make = (key: Redacted.Redacted<string>) => {
  const expected = digest(Redacted.value(key))
  return (headers: Headers.Headers): "accepted" | KeyVerdict => {
    const key = presented(headers)
    if (key === undefined) return "missing"
    return Crypto.timingSafeEqual(digest(key), expected) ? "accepted" : "wrong"
  }
}
