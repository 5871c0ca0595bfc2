import { assert, describe, it } from "@effect/vitest"
import * as Either from "effect/Either"
import * as Input from "../../src/cli/Input.js"

describe("Input", () => {
  it("parses decision heads", () => {
    assert.deepStrictEqual(Input.parseHead("sentiment=positive, negative,neutral"), Either.right({
      name: "sentiment",
      labels: ["positive", "negative", "neutral"]
    }))
    // Only the first '=' separates: labels may contain '='.
    assert.deepStrictEqual(Input.parseHead("op=a=b,c"), Either.right({ name: "op", labels: ["a=b", "c"] }))
    assert.deepStrictEqual(Input.parseHead("yes=yes"), Either.right({ name: "yes", labels: ["yes"] }))
  })

  it("names the input and the rule when a head is malformed", () => {
    assert.deepStrictEqual(Input.parseHead("sentiment"), Either.left(`--head "sentiment": expected NAME=LABEL,LABEL,...`))
    assert.deepStrictEqual(Input.parseHead("=a,b"), Either.left(`--head "=a,b": the head has no name`))
    assert.deepStrictEqual(
      Input.parseHead("x=a,,b"),
      Either.left(`--head "x=a,,b": empty label (labels are separated by single commas)`)
    )
    assert.deepStrictEqual(Input.parseHead("x=a,b,a"), Either.left(`--head "x=a,b,a": label "a" appears twice`))
    assert.deepStrictEqual(Input.parseHeads([]), Either.left("give at least one --head NAME=LABEL,LABEL,..."))
    assert.deepStrictEqual(Input.parseHeads(["x=a", "x=b"]), Either.left(`--head "x" is given twice`))
  })
})
