/**
 * Token ids on the engine protocol (src/domain/TokenArray.ts): a prompt crosses the child boundary
 * as one byte string (u32 little-endian per id), not as an array of numbers that Effect Schema
 * parses element by element on both sides; through the real msgpack serialization every id array
 * comes back as it went, and an id that is not a u32 integer is refused with its position, its
 * value and the limit.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Either from "effect/Either"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import * as fc from "fast-check"
import { Tokens } from "../../src/domain/Generation.js"
import { MAX_TOKEN_ID } from "../../src/domain/TokenArray.js"
import { engineSerialization } from "../../src/native/Framing.js"
import { BeginRequest } from "../../src/native/Protocol.js"

const begin = (prompt: ReadonlyArray<number>, stopTokens?: ReadonlyArray<number>): BeginRequest => ({
  prompt,
  maxTokens: 4,
  sampling: { temperature: 0 },
  generationId: "g-1",
  prefillChunk: 128,
  ...(stopTokens === undefined ? {} : { stopTokens })
})

/** A Begin payload encoded by its schema, through the engine's msgpack frames and back, decoded. */
const overTheWire = (request: BeginRequest) => {
  const encoded = Schema.encodeSync(BeginRequest)(request)
  const parser = engineSerialization.unsafeMake()
  const frame = parser.encode({ _tag: "Request", id: "1", tag: "Begin", payload: encoded, headers: [] })
  const [message] = parser.decode(frame as Uint8Array) as Array<{ readonly payload: unknown }>
  return { encoded, decoded: Schema.decodeUnknownSync(BeginRequest)(message!.payload) }
}

const tokenId = fc.integer({ min: 0, max: MAX_TOKEN_ID })

describe("token ids on the engine protocol", () => {
  it("a prompt is encoded as one byte string of 4 bytes per token", () => {
    const prompt = Array.from({ length: 4000 }, (_, i) => (i * 7919) % 151_936)
    const { encoded } = overTheWire(begin(prompt))
    assert.instanceOf(encoded.prompt, Uint8Array)
    assert.strictEqual((encoded.prompt as unknown as Uint8Array).byteLength, 4 * 4000)
  })

  it("every array of token ids crosses the msgpack frames unchanged (prompt and stop tokens)", () => {
    fc.assert(
      fc.property(fc.array(tokenId, { minLength: 1, maxLength: 300 }), fc.option(fc.array(tokenId, { maxLength: 8 }), { nil: undefined }), (prompt, stop) => {
        const { decoded } = overTheWire(begin(prompt, stop))
        assert.deepStrictEqual(decoded.prompt, prompt)
        assert.deepStrictEqual(decoded.stopTokens, stop)
        assert.isTrue(Array.isArray(decoded.prompt))
      }),
      { numRuns: 200 }
    )
  })

  it("an id that is not a u32 integer is refused with its position, value and the limit", () => {
    for (const [bad, shown] of [[-1, "-1"], [1.5, "1.5"], [MAX_TOKEN_ID + 1, String(MAX_TOKEN_ID + 1)], [Number.NaN, "NaN"]] as const) {
      const result = Schema.encodeEither(Tokens)([5, 6, bad])
      assert.isTrue(Either.isLeft(result), `${shown} is refused`)
      if (Either.isLeft(result)) {
        const message = ParseResult.TreeFormatter.formatErrorSync(result.left)
        assert.include(message, `token 2 is ${shown}`)
        assert.include(message, `from 0 to ${MAX_TOKEN_ID}`)
      }
    }
  })

  it("bytes that are not whole u32 ids are refused with their length", () => {
    const result = Schema.decodeUnknownEither(Tokens)(new Uint8Array(7))
    assert.isTrue(Either.isLeft(result))
    if (Either.isLeft(result)) assert.include(ParseResult.TreeFormatter.formatErrorSync(result.left), "7 bytes of token ids: not a multiple of 4")
  })
})
