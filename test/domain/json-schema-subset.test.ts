/**
 * The JSON-schema subset check: every schema built from the supported shapes passes, and a keyword
 * the grammar cannot express, planted anywhere in one, is refused with the JSON pointer of that
 * keyword.
 */
import { assert, describe, it } from "@effect/vitest"
import * as FastCheck from "effect/FastCheck"
import { parseSupportedJsonSchema } from "../../src/domain/JsonSchemaSubset.js"

type Node = Record<string, unknown>

const leaf: FastCheck.Arbitrary<Node> = FastCheck.oneof(
  FastCheck.constantFrom<Node>({ type: "number" }, { type: "integer" }, { type: "boolean" }, { type: "null" }, { type: ["string", "null"] }),
  FastCheck.record({ type: FastCheck.constant("string"), maxLength: FastCheck.nat(20) }),
  FastCheck.record({ enum: FastCheck.array(FastCheck.oneof(FastCheck.string(), FastCheck.integer(), FastCheck.boolean()), { minLength: 1 }) }),
  FastCheck.record({ const: FastCheck.string() })
)

const node: FastCheck.Arbitrary<Node> = FastCheck.letrec<{ node: Node }>((tie) => ({
  node: FastCheck.oneof(
    { depthSize: "small", withCrossShrink: true },
    leaf,
    FastCheck.dictionary(FastCheck.string({ minLength: 1, maxLength: 6 }), tie("node"), { maxKeys: 3 }).map((properties) => ({
      type: "object",
      properties,
      required: Object.keys(properties)
    })),
    tie("node").map((items) => ({ type: "array", items, maxItems: 3 })),
    FastCheck.array(tie("node"), { minLength: 1, maxLength: 3 }).map((oneOf) => ({ oneOf }))
  )
})).node

/** Every path to a node inside a schema (JSON pointers), with the node. */
const nodesOf = (schema: Node, path = ""): Array<[string, Node]> => {
  const children: Array<[string, Node]> = []
  const properties = schema["properties"]
  if (typeof properties === "object" && properties !== null) {
    for (const [k, v] of Object.entries(properties)) children.push(...nodesOf(v as Node, `${path}/properties/${k.replace(/~/g, "~0").replace(/\//g, "~1")}`))
  }
  if (typeof schema["items"] === "object") children.push(...nodesOf(schema["items"] as Node, `${path}/items`))
  if (Array.isArray(schema["oneOf"])) schema["oneOf"].forEach((v, i) => children.push(...nodesOf(v as Node, `${path}/oneOf/${i}`)))
  return [[path, schema], ...children]
}

describe("JsonSchemaSubset", () => {
  it.prop("schemas of the supported shapes pass", [node], ([schema]) => {
    assert.strictEqual(parseSupportedJsonSchema(schema)._tag, "Supported")
  })

  it.prop(
    "an unsupported keyword planted in any node is refused at its pointer",
    [node, FastCheck.nat(), FastCheck.constantFrom("pattern", "minimum", "anyOf", "allOf", "not", "uniqueItems")],
    ([generated, pick, keyword]) => {
      // A tree copy: the generator may share one node object between places.
      const schema = JSON.parse(JSON.stringify(generated)) as Node
      const nodes = nodesOf(schema)
      const [path, target] = nodes[pick % nodes.length]!
      target[keyword] = keyword === "anyOf" || keyword === "allOf" ? [{ type: "null" }] : 1
      const check = parseSupportedJsonSchema(schema)
      assert(check._tag === "Unsupported", JSON.stringify(schema))
      assert.strictEqual(check.path, `${path}/${keyword}`)
    }
  )

  it("a $ref must name a definition in scope", () => {
    const ok = parseSupportedJsonSchema({ $defs: { p: { type: "integer" } }, type: "array", items: { $ref: "#/$defs/p" } })
    assert.strictEqual(ok._tag, "Supported")
    const missing = parseSupportedJsonSchema({ type: "array", items: { $ref: "#/$defs/p" } })
    assert(missing._tag === "Unsupported")
    assert.strictEqual(missing.path, "/items/$ref")
  })

})
