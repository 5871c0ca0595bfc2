/**
 * A request body decoded against its schema: fields the schema does not list are ignored (as
 * OpenAI-compatible servers do); the first field of the wrong shape is a 400 naming it as the
 * client wrote it (`messages[1].content`).
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import { invalidField, type Refused } from "./Refused.js"

/** A path as a field name: `messages[1].content[0].type`. */
export const fieldName = (path: ReadonlyArray<PropertyKey>): string =>
  path.reduce<string>(
    (field, key) => (typeof key === "number" ? `${field}[${key}]` : field === "" ? String(key) : `${field}.${String(key)}`),
    ""
  )

export const decodeBody = <A, I>(schema: Schema.Schema<A, I>) => {
  const decode = Schema.decodeUnknownEither(schema, { errors: "first", onExcessProperty: "ignore" })
  return (body: unknown): Effect.Effect<A, Refused> =>
    Either.match(decode(body), {
      onRight: Effect.succeed,
      onLeft: (error) => {
        const [issue] = ParseResult.ArrayFormatter.formatErrorSync(error)
        const param = fieldName(issue?.path ?? [])
        return Effect.fail(
          param === ""
            ? invalidField("body", `the request body must be a JSON object: ${issue?.message ?? "invalid"}`)
            : invalidField(param, `invalid ${param}: ${issue?.message ?? "invalid"}`)
        )
      }
    })
}
