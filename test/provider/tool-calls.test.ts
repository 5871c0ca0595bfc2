/**
 * Parsing the tool channel's text: a Qwen-style call `{"name": ..., "arguments": {...}}` (with
 * arguments also as a JSON string of an object) parses to its name and arguments for any name and
 * any JSON object; everything else is malformed with a reason.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Either from "effect/Either"
import * as fc from "effect/FastCheck"
import { parseToolCall } from "../../src/services/provider/ToolCalls.js"

const jsonObject = fc.dictionary(fc.string(), fc.jsonValue())

describe("tool call parsing", () => {
  it.prop(
    "any name and JSON object arguments parse back, as an object or a JSON string, whitespace around ignored",
    [fc.string({ minLength: 1 }), jsonObject, fc.constantFrom("", "\n", " \n "), fc.boolean()],
    ([name, args, pad, asString]) => {
      const text = `${pad}${JSON.stringify({ name, arguments: asString ? JSON.stringify(args) : args })}${pad}`
      const parsed = parseToolCall(text)
      assert(Either.isRight(parsed), `refused: ${Either.isLeft(parsed) ? parsed.left : ""}`)
      assert.strictEqual(parsed.right.name, name)
      assert.deepStrictEqual(parsed.right.arguments, JSON.parse(JSON.stringify(args)))
    }
  )

  it("what is not a call is malformed, with the reason", () => {
    const reason = (text: string) => Either.match(parseToolCall(text), { onLeft: (r) => r, onRight: () => "parsed" })
    assert.match(reason("{\"name\": \"f\", \"arguments\": {"), /^not JSON/)
    assert.strictEqual(reason("[1, 2]"), "not a JSON object")
    assert.strictEqual(reason("{\"arguments\": {}}"), "no \"name\" string")
    assert.strictEqual(reason("{\"name\": \"f\", \"arguments\": [1]}"), "\"arguments\" is not a JSON object")
    assert.strictEqual(reason("{\"name\": \"f\", \"arguments\": \"not json\"}"), "\"arguments\" is not a JSON object")
    assert.strictEqual(reason("{\"name\": \"now\"}"), "parsed")
  })
})
