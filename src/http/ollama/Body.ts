/**
 * Reading an Ollama request body: JSON decoded against the route's schema, every failure a 400
 * refusal that names the field (`messages[1].role`) the way Ollama's clients spell it. Kept small
 * and separate so that the server's shared body reader can replace it.
 */
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as Effect from "effect/Effect"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import { badRequest, type Refusal } from "../Refusals.js"

/** A path as a client writes it: `messages[1].tool_calls[0].function.name`. */
export const pathText = (path: ReadonlyArray<PropertyKey>): string =>
  path.reduce<string>(
    (text, key) => (typeof key === "number" ? `${text}[${key}]` : text === "" ? String(key) : `${text}.${String(key)}`),
    ""
  )

/** The first issue of a decoding failure, as a refusal naming its field. */
export const refusalOfParseError = (error: ParseResult.ParseError): Refusal => {
  const [issue] = ParseResult.ArrayFormatter.formatErrorSync(error)
  if (issue === undefined) return badRequest(error.message)
  const field = pathText(issue.path)
  return field === "" ? badRequest(issue.message) : badRequest(`invalid ${field}: ${issue.message}`, field)
}

/** Decodes an already parsed body against `schema`. */
export const decode = <A, I>(schema: Schema.Schema<A, I>) => {
  const decodeEither = Schema.decodeUnknownEither(schema, { errors: "first" })
  return (body: unknown): Effect.Effect<A, Refusal> =>
    Effect.mapError(decodeEither(body), refusalOfParseError)
}

/** The request's JSON body decoded against `schema`; an empty body is Ollama's "missing request body". */
export const readJson = <A, I>(schema: Schema.Schema<A, I>) => {
  const decodeBody = decode(schema)
  return Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const text = yield* Effect.mapError(request.text, (error) => badRequest(`the request body could not be read: ${error.message}`))
    if (text.trim() === "") return yield* Effect.fail(badRequest("missing request body"))
    const body = yield* Effect.try({
      try: (): unknown => JSON.parse(text),
      catch: (cause) => badRequest(`the request body is not JSON: ${cause instanceof Error ? cause.message : String(cause)}`)
    })
    return yield* decodeBody(body)
  })
}
