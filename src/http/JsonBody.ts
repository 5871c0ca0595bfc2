/**
 * A request body read as JSON and decoded with a Schema, under the server's body limit, for the
 * routes of both APIs:
 *
 *   const body = yield* JsonBody.readJson(ChatRequest)   // Effect<ChatRequest, BodyRefused, ...>
 *
 * The failure carries a `Refusal` the route writes in its API's shape (`ErrorBodies`):
 * - a body over `maxBodyBytes` (one sent without Content-Length; a declared one was refused by the
 *   gate already): 413 `body_too_large`, once the client has sent it all;
 * - empty, not UTF-8, or not JSON: 400 `invalid_json` (an API may word the empty case its own way:
 *   Ollama's "missing request body");
 * - JSON that is not the schema: 400 `invalid_value`, `param` the path of the first issue as the
 *   client wrote it (`messages[1].content`), the message naming it (`invalid messages[1].content: ...`).
 * Fields the schema does not name are ignored (clients send more than any server reads). The
 * content type is not checked: curl's `-d` sends `application/x-www-form-urlencoded`, and
 * Ollama's documentation uses it that way.
 */
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as Arr from "effect/Array"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as ParseResult from "effect/ParseResult"
import * as AST from "effect/SchemaAST"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import { HttpConfig } from "./HttpConfig.js"
import { badRequest, type Refusal } from "./Refusals.js"
import { bodyTooLarge } from "./ServerRefusals.js"

/** A body a route cannot use, and the refusal to answer with. */
export class BodyRefused extends Data.TaggedError("BodyRefused")<{ readonly refusal: Refusal }> {
  override get message() {
    return this.refusal.message
  }
}

const refused = (refusal: Refusal) => new BodyRefused({ refusal })

/** A Schema issue's path as a client writes it: `messages[1].content`. */
export const paramOf = (path: ReadonlyArray<PropertyKey>): string | null =>
  path.length === 0
    ? null
    : path.reduce<string>(
      (param, key) => typeof key === "number" ? `${param}[${key}]` : param === "" ? String(key) : `${param}.${String(key)}`,
      ""
    )

/**
 * The body's bytes, up to `limit`. A body over it is read to its end but not kept (memory stays
 * bounded; the request timeout bounds the time), so that the client, still sending, can read the
 * 413 that names its size: a connection closed under a sender loses the answer.
 */
const readBytes = (request: HttpServerRequest.HttpServerRequest, limit: number): Effect.Effect<Uint8Array, BodyRefused> =>
  Effect.suspend(() => {
    const chunks: Array<Uint8Array> = []
    let size = 0
    return request.stream.pipe(
      Stream.mapError((error) => refused(badRequest(`the request body could not be read: ${error.message}`, null, "unreadable_body"))),
      Stream.runForEach((chunk) =>
        Effect.sync(() => {
          size += chunk.length
          if (size <= limit) chunks.push(chunk)
        })
      ),
      Effect.filterOrFail(() => size <= limit, () => refused(bodyTooLarge(limit, size))),
      Effect.map(() => Buffer.concat(chunks))
    )
  })

const utf8 = new TextDecoder("utf-8", { fatal: true })

export interface ReadOptions {
  /** The message for an empty body. Default: "the request body is empty: expected JSON". */
  readonly emptyBody?: string | undefined
}

/** The text as JSON. */
export const parseJson = (bytes: Uint8Array, options: ReadOptions = {}): Effect.Effect<unknown, BodyRefused> =>
  Effect.suspend(() => {
    if (bytes.length === 0) {
      return Effect.fail(refused(badRequest(options.emptyBody ?? "the request body is empty: expected JSON", null, "invalid_json")))
    }
    let text: string
    try {
      text = utf8.decode(bytes)
    } catch {
      return Effect.fail(refused(badRequest("the request body is not UTF-8 text", null, "invalid_json")))
    }
    try {
      return Effect.succeed(JSON.parse(text) as unknown)
    } catch (cause) {
      const reason = cause instanceof Error ? cause.message : String(cause)
      return Effect.fail(refused(badRequest(`the request body is not valid JSON: ${reason}`, null, "invalid_json")))
    }
  })

/** A value as the client sent it, clipped: it goes into a message. */
const shown = (value: unknown): string => {
  const text = JSON.stringify(value) ?? String(value)
  return text.length > 60 ? `${text.slice(0, 60)}...` : text
}

/**
 * The issue to report and where: the first issue, followed down to the field at fault, except
 * that a union whose members all failed is reported as a whole (`Expected string | ReadonlyArray<...>`)
 * rather than as its first member's failure.
 */
export const firstIssue = (
  issue: ParseResult.ParseIssue,
  path: ReadonlyArray<PropertyKey> = []
): { readonly path: ReadonlyArray<PropertyKey>; readonly message: string } => {
  if (issue._tag === "Pointer") return firstIssue(issue.issue, [...path, ...(Array.isArray(issue.path) ? issue.path : [issue.path])])
  if (issue._tag === "Composite") {
    const issues = Arr.ensure(issue.issues)
    if (AST.isUnion(issue.ast) && issues.length > 1) {
      return { path, message: `Expected ${String(issue.ast)}, actual ${shown(issue.actual)}` }
    }
    return firstIssue(issues[0]!, path)
  }
  const leaf = ParseResult.ArrayFormatter.formatIssueSync(issue)[0]
  return leaf === undefined ? { path, message: issue._tag } : { path: [...path, ...leaf.path], message: leaf.message }
}

/** `value` decoded with `schema`; the first issue names its field. */
export const decode = <A, I, R>(schema: Schema.Schema<A, I, R>) => {
  const decodeUnknown = Schema.decodeUnknown(schema, { errors: "all", onExcessProperty: "ignore" })
  return (value: unknown): Effect.Effect<A, BodyRefused, R> =>
    Effect.mapError(decodeUnknown(value), (error) => {
      const issue = firstIssue(error.issue)
      const param = paramOf(issue.path)
      return refused(badRequest(param === null ? issue.message : `invalid ${param}: ${issue.message}`, param))
    })
}

/** The request's body as JSON decoded with `schema`, under HttpConfig's `maxBodyBytes`. */
export const readJson = <A, I, R>(
  schema: Schema.Schema<A, I, R>,
  options: ReadOptions = {}
): Effect.Effect<A, BodyRefused, R | HttpServerRequest.HttpServerRequest | HttpConfig> => {
  const decodeBody = decode(schema)
  return Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const { maxBodyBytes } = yield* HttpConfig
    const bytes = yield* readBytes(request, maxBodyBytes)
    return yield* decodeBody(yield* parseJson(bytes, options))
  })
}
