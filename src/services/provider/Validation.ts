/**
 * Request validation at the Provider's edge: a request is checked once against its refined domain
 * schema (src/domain/RequestRules.ts) before anything is rendered, queued or sent to the engine;
 * the first broken rule is an InvalidRequest naming the field, the value and the rule.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import type { DecisionHead, ResponseFormat } from "../../domain/Inference.js"
import { ANY_JSON_OBJECT_SCHEMA, parseSupportedJsonSchema } from "../../domain/JsonSchemaSubset.js"
import { MAX_LABEL_TOKENS } from "../../domain/RequestRules.js"
import { InvalidRequest } from "../ProviderError.js"

export const invalid = (field: string, value: unknown, reason: string) =>
  new InvalidRequest({ field, value: JSON.stringify(value) ?? String(value), reason })

/** The value at `path` in `input` (the request itself for the empty path: then its field names). */
const valueAt = (input: unknown, path: ReadonlyArray<PropertyKey>): unknown =>
  path.length === 0 && typeof input === "object" && input !== null
    ? Object.keys(input)
    : path.reduce<unknown>(
      (value, key) => (typeof value === "object" && value !== null ? (value as Record<PropertyKey, unknown>)[key] : undefined),
      input
    )

/** A path as a field name: `tools[1].name`. */
const fieldOf = (path: ReadonlyArray<PropertyKey>): string =>
  path.reduce<string>(
    (field, key) => (typeof key === "number" ? `${field}[${key}]` : field === "" ? String(key) : `${field}.${String(key)}`),
    ""
  )

/** A value as an error names it: a list by its length, a long text by its start. */
const named = (value: unknown): unknown =>
  Array.isArray(value) ? value.length : typeof value === "string" && value.length > 200 ? `${value.slice(0, 200)}…` : value

/** Checks `request` against `schema`; the first issue is the InvalidRequest. */
export const validate = <A, I>(schema: Schema.Schema<A, I>) => {
  const check = Schema.validateEither(schema, { errors: "first" })
  return (request: A): Effect.Effect<A, InvalidRequest> =>
    Either.match(check(request), {
      onRight: Effect.succeed,
      onLeft: (error) => {
        const [issue] = ParseResult.ArrayFormatter.formatErrorSync(error)
        const path = issue?.path ?? []
        return Effect.fail(invalid(path.length === 0 ? "request" : fieldOf(path), named(valueAt(request, path)), issue?.message ?? "invalid"))
      }
    })
}

/**
 * Every label within MAX_LABEL_TOKENS tokens of the decision model (`tokens`: each distinct
 * label's count); the first that is longer is the InvalidRequest, with its count and the limit.
 */
export const checkLabelTokens = (heads: ReadonlyArray<DecisionHead>, tokens: ReadonlyMap<string, number>) => {
  for (const [h, head] of heads.entries()) {
    for (const [l, label] of head.labels.entries()) {
      const count = tokens.get(label) ?? 0
      if (count > MAX_LABEL_TOKENS) {
        return Effect.fail(
          invalid(`heads[${h}].labels[${l}]`, named(label), `is ${count} tokens of the decision model; a label has at most ${MAX_LABEL_TOKENS}`)
        )
      }
    }
  }
  return Effect.void
}

/**
 * The JSON schema (as its JSON text, the engine's grammar cache key) a response format decodes
 * under; a schema the grammar cannot express exactly is refused, naming the part.
 */
export const jsonSchemaOf = (format: ResponseFormat) => {
  if (format.type === "json") return Effect.succeed(JSON.stringify(ANY_JSON_OBJECT_SCHEMA))
  const check = parseSupportedJsonSchema(format.schema)
  return check._tag === "Supported"
    ? Effect.succeed(JSON.stringify(check.schema))
    : Effect.fail(invalid(`responseFormat.schema${check.path}`, check.value, check.reason))
}
