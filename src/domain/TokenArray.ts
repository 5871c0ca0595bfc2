/**
 * Token ids on the engine protocol: an array of ids in memory, one binary string on the wire (each
 * id a little-endian u32). An array of numbers costs Effect Schema a parse step per element on each
 * side of the child boundary (a 4,000-token Begin's encode, frame and decode: 4.2-6.2 ms of CPU,
 * against 0.09-0.27 ms as bytes; bench/_followup-wire.ts); one byte string costs one plain loop. Ids are integers from 0 to
 * 2^32 - 1; anything else is refused with the position, the value and the limit.
 */
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"

/** The largest token id the wire carries (u32). */
export const MAX_TOKEN_ID = 0xffff_ffff

/** Any array (its elements are checked once, by the transformation below). */
const TokenIdArray = Schema.declare(
  (u: unknown): u is ReadonlyArray<number> => Array.isArray(u),
  { identifier: "TokenIdArray", description: "an array of token ids" }
)

/** The first element that is not a token id, as a message; undefined when all are. */
const badTokenId = (tokens: ReadonlyArray<unknown>): string | undefined => {
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i]
    if (typeof t !== "number" || !Number.isInteger(t) || t < 0 || t > MAX_TOKEN_ID) {
      return `token ${i} is ${String(t)}: a token id is an integer from 0 to ${MAX_TOKEN_ID}`
    }
  }
  return undefined
}

/** Token ids as little-endian u32 bytes. */
export const encodeTokens = (tokens: ReadonlyArray<number>): Uint8Array => {
  const bytes = new Uint8Array(tokens.length * 4)
  const view = new DataView(bytes.buffer)
  for (let i = 0; i < tokens.length; i++) view.setUint32(i * 4, tokens[i]!, true)
  return bytes
}

/** The token ids of little-endian u32 bytes (any alignment: a slice of a received frame). */
export const decodeTokens = (bytes: Uint8Array): Array<number> => {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  const tokens = new Array<number>(bytes.byteLength >>> 2)
  for (let i = 0; i < tokens.length; i++) tokens[i] = view.getUint32(i * 4, true)
  return tokens
}

/** Token ids: `ReadonlyArray<number>` in memory, `Uint8Array` (u32 little-endian each) encoded. */
export const TokenArray = Schema.transformOrFail(Schema.Uint8ArrayFromSelf, TokenIdArray, {
  strict: true,
  decode: (bytes, _, ast) =>
    bytes.byteLength % 4 === 0
      ? ParseResult.succeed(decodeTokens(bytes))
      : ParseResult.fail(new ParseResult.Type(ast, bytes, `${bytes.byteLength} bytes of token ids: not a multiple of 4`)),
  encode: (tokens, _, ast) => {
    const bad = badTokenId(tokens)
    return bad === undefined ? ParseResult.succeed(encodeTokens(tokens)) : ParseResult.fail(new ParseResult.Type(ast, tokens, bad))
  }
})
