/**
 * The JSON-schema subset that node-llama-cpp's JSON-schema grammar expresses exactly, checked
 * before a grammar is built (by the Provider, and again by the engine child). A keyword the grammar
 * would silently ignore (`pattern`, `minimum`, `anyOf`, ...) is refused, naming where it is, so an
 * answer decoded under the grammar always matches the schema it was asked for. Pure: shared by host
 * and engine, no node-llama-cpp here.
 *
 * Supported per node: `$ref` to `#/$defs/<name>` (with `$defs` on any ancestor), `oneOf`, `const`,
 * `enum` (scalars), and `type`: "object" (`properties`, `required`, `additionalProperties`,
 * `minProperties`, `maxProperties`), "array" (`items`, `prefixItems`, `minItems`, `maxItems`),
 * "string" (`minLength`, `maxLength`, or a `format` of date-time/date/time), "number", "integer",
 * "boolean", "null", or a list of the scalar types. Annotations (`description`, `title`, ...) pass.
 * The grammar produces every listed property, so `required` may name only listed properties.
 */

export type SchemaCheck =
  | { readonly _tag: "Supported"; readonly schema: Readonly<Record<string, unknown>> }
  | {
    readonly _tag: "Unsupported"
    /** Where, as a JSON pointer into the schema ("" is the root). */
    readonly path: string
    readonly value: unknown
    readonly reason: string
  }

/** Deepest nesting of schema nodes accepted (node-llama-cpp refuses beyond its own limit). */
export const MAX_SCHEMA_DEPTH = 64

const annotations = new Set(["description", "title", "$comment", "examples", "default", "$schema", "$id"])
const scalarTypes = new Set(["string", "number", "integer", "boolean", "null"])
const stringFormats = new Set(["date-time", "date", "time"])

/** Keywords each kind of node may carry besides annotations. */
const keywordsOf = {
  ref: ["$ref", "$defs"],
  oneOf: ["oneOf", "$defs"],
  // `type` beside const/enum is ignored by the grammar, and the values already fix the type.
  const: ["const", "type"],
  enum: ["enum", "type"],
  object: ["type", "properties", "required", "additionalProperties", "minProperties", "maxProperties", "$defs"],
  array: ["type", "items", "prefixItems", "minItems", "maxItems", "$defs"],
  string: ["type", "minLength", "maxLength"],
  formatString: ["type", "format"],
  scalar: ["type"]
} as const

class Unsupported {
  constructor(readonly path: string, readonly value: unknown, readonly reason: string) {}
}

const isRecord = (value: unknown): value is Readonly<Record<string, unknown>> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

const isScalar = (value: unknown) =>
  value === null || typeof value === "string" || typeof value === "boolean" || (typeof value === "number" && Number.isFinite(value))

const pointer = (path: string, key: string | number) => `${path}/${String(key).replace(/~/g, "~0").replace(/\//g, "~1")}`

const kindOf = (node: Readonly<Record<string, unknown>>, path: string): keyof typeof keywordsOf => {
  if ("$ref" in node) return "ref"
  if ("oneOf" in node) return "oneOf"
  if ("const" in node) return "const"
  if ("enum" in node) return "enum"
  const type = node["type"]
  if (type === "object") return "object"
  if (type === "array") return "array"
  if (type === "string") return "format" in node ? "formatString" : "string"
  if (typeof type === "string" && scalarTypes.has(type)) return "scalar"
  if (Array.isArray(type) && type.length > 0 && type.every((t) => typeof t === "string" && scalarTypes.has(t))) return "scalar"
  if (type === undefined) {
    const keyword = Object.keys(node).find((k) => !annotations.has(k))
    throw keyword === undefined
      ? new Unsupported(path, node, "a schema without type, enum, const, oneOf or $ref (any value) is not supported")
      : new Unsupported(pointer(path, keyword), node[keyword], `keyword "${keyword}" is not supported (the grammar cannot express it)`)
  }
  throw new Unsupported(pointer(path, "type"), type, `must be one of ${[...scalarTypes, "object", "array"].join(", ")} or a list of the scalar types`)
}

const nonNegativeInt = (node: Readonly<Record<string, unknown>>, key: string, path: string) => {
  const value = node[key]
  if (value !== undefined && !(Number.isSafeInteger(value) && (value as number) >= 0)) {
    throw new Unsupported(pointer(path, key), value, "must be a non-negative integer")
  }
  return value as number | undefined
}

const checkRange = (node: Readonly<Record<string, unknown>>, min: string, max: string, path: string) => {
  const low = nonNegativeInt(node, min, path)
  const high = nonNegativeInt(node, max, path)
  if (low !== undefined && high !== undefined && high < low) throw new Unsupported(pointer(path, max), high, `must be at least ${min} (${low})`)
}

const check = (node: unknown, path: string, defs: ReadonlySet<string>, depth: number): void => {
  if (depth > MAX_SCHEMA_DEPTH) throw new Unsupported(path, "...", `schemas nest at most ${MAX_SCHEMA_DEPTH} deep`)
  if (!isRecord(node)) throw new Unsupported(path, node, "a schema must be an object")
  const kind = kindOf(node, path)
  const allowed: ReadonlyArray<string> = keywordsOf[kind]
  for (const key of Object.keys(node)) {
    if (!allowed.includes(key) && !annotations.has(key)) {
      throw new Unsupported(pointer(path, key), node[key], `keyword "${key}" is not supported with ${kind === "ref" ? "$ref" : kind} (the grammar cannot express it)`)
    }
  }
  let scope = defs
  const ownDefs = node["$defs"]
  if (ownDefs !== undefined) {
    if (!isRecord(ownDefs)) throw new Unsupported(pointer(path, "$defs"), ownDefs, "must be an object of schemas")
    scope = new Set([...defs, ...Object.keys(ownDefs)])
    for (const [name, def] of Object.entries(ownDefs)) check(def, pointer(pointer(path, "$defs"), name), scope, depth + 1)
  }
  const children = (key: string) => {
    const list = node[key]
    if (!Array.isArray(list)) throw new Unsupported(pointer(path, key), list, "must be a list of schemas")
    list.forEach((item, i) => check(item, pointer(pointer(path, key), i), scope, depth + 1))
    return list
  }
  switch (kind) {
    case "ref": {
      const ref = node["$ref"]
      const name = typeof ref === "string" && ref.startsWith("#/$defs/") ? ref.slice("#/$defs/".length) : undefined
      if (name === undefined || !scope.has(name)) {
        throw new Unsupported(pointer(path, "$ref"), ref, "must be #/$defs/<name> naming a definition in $defs of this schema or one around it")
      }
      return
    }
    case "oneOf":
      if (children("oneOf").length === 0) throw new Unsupported(pointer(path, "oneOf"), [], "must list at least one schema")
      return
    case "const":
      if (!isScalar(node["const"])) throw new Unsupported(pointer(path, "const"), node["const"], "must be a string, number, boolean or null")
      return
    case "enum": {
      const values = node["enum"]
      if (!Array.isArray(values) || values.length === 0 || !values.every(isScalar)) {
        throw new Unsupported(pointer(path, "enum"), values, "must be a non-empty list of strings, numbers, booleans or nulls")
      }
      return
    }
    case "object": {
      const properties = node["properties"] ?? {}
      if (!isRecord(properties)) throw new Unsupported(pointer(path, "properties"), properties, "must be an object of schemas")
      for (const [name, property] of Object.entries(properties)) {
        check(property, pointer(pointer(path, "properties"), name), scope, depth + 1)
      }
      const required = node["required"] ?? []
      if (!Array.isArray(required)) throw new Unsupported(pointer(path, "required"), required, "must be a list of property names")
      const unknown = required.find((name) => typeof name !== "string" || !(name in properties))
      if (unknown !== undefined) throw new Unsupported(pointer(path, "required"), unknown, "names no listed property")
      const additional = node["additionalProperties"]
      if (additional !== undefined && typeof additional !== "boolean") check(additional, pointer(path, "additionalProperties"), scope, depth + 1)
      checkRange(node, "minProperties", "maxProperties", path)
      return
    }
    case "array": {
      if (node["items"] !== undefined) check(node["items"], pointer(path, "items"), scope, depth + 1)
      if (node["prefixItems"] !== undefined) children("prefixItems")
      checkRange(node, "minItems", "maxItems", path)
      return
    }
    case "string":
      checkRange(node, "minLength", "maxLength", path)
      return
    case "formatString":
      if (typeof node["format"] !== "string" || !stringFormats.has(node["format"])) {
        throw new Unsupported(pointer(path, "format"), node["format"], `must be one of ${[...stringFormats].join(", ")}`)
      }
      return
    case "scalar":
      return
  }
}

/** Checks a JSON schema against the subset the grammar expresses exactly. */
export const parseSupportedJsonSchema = (schema: unknown): SchemaCheck => {
  try {
    check(schema, "", new Set(), 0)
    return { _tag: "Supported", schema: schema as Readonly<Record<string, unknown>> }
  } catch (error) {
    if (error instanceof Unsupported) return { _tag: "Unsupported", path: error.path, value: error.value, reason: error.reason }
    throw error
  }
}

/** The schema `{ type: "json" }` stands for: any JSON object. */
export const ANY_JSON_OBJECT_SCHEMA: Readonly<Record<string, unknown>> = { type: "object", additionalProperties: true }
