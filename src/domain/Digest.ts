/**
 * Content digests: `sha256:` followed by exactly 64 lowercase hex digits. A `Digest` is a
 * branded string whose shape has been checked; only a `Digest` may ever become part of a path.
 */
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"

const pattern = /^sha256:[0-9a-f]{64}$/

/** A validated `sha256:<64 lowercase hex>` digest. */
export const Digest = Schema.String.pipe(
  Schema.filter((s) => pattern.test(s), {
    identifier: "Digest",
    message: () => "a digest is sha256: followed by exactly 64 lowercase hex digits"
  }),
  Schema.brand("nativegen/Digest")
)
export type Digest = typeof Digest.Type

/** True when `u` has the shape of a digest. */
export const isDigest = (u: unknown): u is Digest => typeof u === "string" && pattern.test(u)

/** Decodes an untrusted value into a digest, or `Either.left` with the reason. */
export const parse = (u: unknown): Either.Either<Digest, string> =>
  isDigest(u) ? Either.right(u) : Either.left(describe(u))

/** Builds a digest from a 64-hex sha256 value (as `Hash.digest("hex")` returns it). */
export const fromHex = (hex: string): Either.Either<Digest, string> => parse(`sha256:${hex}`)

/** The 64 hex digits of a digest. */
export const hex = (digest: Digest): string => digest.slice("sha256:".length)

/** Why a value is not a digest, in words (never echoes unbounded input). */
export const describe = (u: unknown): string => {
  if (typeof u !== "string") return `not a string (${typeof u})`
  if (u.length === 0) return "empty"
  if (u.includes("\0")) return "contains NUL"
  if (!u.startsWith("sha256:")) return "algorithm is not sha256"
  const rest = u.slice("sha256:".length)
  if (rest.length !== 64) return `expected 64 hex digits, got ${rest.length} characters`
  if (/[A-F]/.test(rest)) return "uppercase hex"
  return "not lowercase hex"
}
