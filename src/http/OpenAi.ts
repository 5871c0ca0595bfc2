/**
 * OpenAI's API under `/v1`: models, chat completions and completions, streamed as server-sent
 * events or whole, over the Provider (through KeyedConversations for continuation reuse).
 *
 * A request is refused before it runs when its body does not map (400 naming the field), it names
 * another model (404) or the engine is not ready (503 with Retry-After). A stream's response waits
 * for the generation's first chunk, so that a refusal before any output (a prompt over the
 * context, a full queue) keeps its status; a failure after it is an error event that ends the
 * stream. A client that disconnects interrupts the handler's fiber, and with it the generation.
 */
import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import * as HttpRouter from "@effect/platform/HttpRouter"
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Chunk from "effect/Chunk"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as Crypto from "node:crypto"
import type { GenerateChunk, GenerateRequest } from "../domain/Inference.js"
import { Provider } from "../services/Provider.js"
import type { ProviderError } from "../services/ProviderError.js"
import * as ErrorBodies from "./ErrorBodies.js"
import { HttpConfig } from "./HttpConfig.js"
import * as EventStream from "./EventStream.js"
import { type BodyRefused, readJson } from "./JsonBody.js"
import { KeyedConversations } from "./KeyedConversations.js"
import type { Refusal } from "./Refusals.js"
import { chatCompletion, chatStream } from "./openai/ChatResponse.js"
import { completion, completionStream } from "./openai/CompletionResponse.js"
import { type KeySource, refusalFor } from "./openai/Errors.js"
import { conversationKeyOf, laneOf } from "./openai/Extensions.js"
import { generationModel, modelNotFound, modelObject } from "./openai/Models.js"
import { Refused } from "./openai/Refused.js"
import { ChatCompletionRequest, CompletionRequest } from "./openai/Requests.js"
import { chatRequest, completionRequest, type ParamNames } from "./openai/ToGenerate.js"
import type { Done } from "./openai/Usage.js"

/** The error event a stream ends with, in OpenAI's error shape. */
const errorBody = (refusal: Refusal) => ({
  error: { message: refusal.message, type: refusal.type, param: refusal.param, code: refusal.code }
})

const refused = (refusal: Refusal) => new Refused({ refusal })

/** The generation model when it is the one asked for (none asked: it) and the engine is ready. */
const readyModel = (requested: string | null | undefined) =>
  Effect.gen(function*() {
    const readiness = yield* (yield* Provider).readiness
    const { retryAfterSeconds } = yield* HttpConfig
    const role = generationModel(readiness)
    if (role !== undefined && requested !== null && requested !== undefined && requested !== role.model) {
      return yield* refused(modelNotFound(requested))
    }
    if (role === undefined || readiness.state !== "ready") {
      return yield* refused({
        status: 503,
        type: "unavailable_error",
        code: "engine_unavailable",
        param: null,
        message: `the engine is ${readiness.state}${readiness.reason === null ? "" : `: ${readiness.reason}`}`,
        retryAfterSeconds
      })
    }
    return role
  })

/**
 * The generation under the client's key. Without a maximum from the client the request gives
 * none: the Provider's budget is then what the admitted context leaves after the rendered prompt
 * (tools and continuation included), and a prompt that fills the context alone is ContextExceeded.
 */
const generation = (
  request: GenerateRequest,
  key: string | undefined
): Effect.Effect<Stream.Stream<GenerateChunk, ProviderError>, never, KeyedConversations> =>
  Effect.map(KeyedConversations, (keyed) => keyed.generate(key, request))

/** Everything a route needs to turn a Provider error into its refusal. */
interface ErrorContext {
  readonly params: ParamNames
  readonly key: KeySource | undefined
  readonly retryAfterSeconds: number
}

const runWhole = (stream: Stream.Stream<GenerateChunk, ProviderError>, errors: ErrorContext) =>
  Effect.gen(function*() {
    const chunks = Chunk.toReadonlyArray(
      yield* Stream.runCollect(stream).pipe(Effect.mapError((e) => refused(refusalFor(e, errors))))
    )
    const done = chunks.at(-1)
    if (done?._tag !== "Done") return yield* Effect.dieMessage("a generation ended without its Done chunk")
    return { chunks, done: done satisfies Done }
  })

/**
 * The generation as server-sent events: the first chunk is awaited (a failure before it is the
 * refusal, with its status), then `start`, every chunk's events and `[DONE]`; a failure after
 * the first chunk is an error event that ends the stream.
 */
const runStreamed = (
  stream: Stream.Stream<GenerateChunk, ProviderError>,
  start: ReadonlyArray<object>,
  eventsOf: (chunk: GenerateChunk) => ReadonlyArray<object>,
  errors: ErrorContext
): Effect.Effect<HttpServerResponse.HttpServerResponse, Refused, Scope.Scope> =>
  Effect.gen(function*() {
    const whole = yield* Effect.mapError(EventStream.started(stream), (e) => refused(refusalFor(e, errors)))
    const events = Stream.mapConcat(whole, eventsOf)
    return EventStream.serverSentEvents(Stream.concat(Stream.fromIterable(start), events), {
      onFailure: (e) => errorBody(refusalFor(e, errors)),
      opening: false
    })
  })

const answerRefusals = <R>(handler: Effect.Effect<HttpServerResponse.HttpServerResponse, Refused | BodyRefused, R>) =>
  Effect.catchTags(handler, {
    Refused: (e) => Effect.succeed(ErrorBodies.openAi(e.refusal)),
    BodyRefused: (e) => Effect.succeed(ErrorBodies.openAi(e.refusal))
  })

/**
 * What both generation routes do once the body is mapped: the extensions read from the headers,
 * the model and the engine checked, and the generation (not yet run) under the client's key.
 */
const start = (
  request: HttpServerRequest.HttpServerRequest,
  body: { readonly model?: string | null | undefined; readonly prompt_cache_key?: string | null | undefined },
  mapped: { readonly request: GenerateRequest; readonly params: ParamNames }
) =>
  Effect.gen(function*() {
    const key = yield* conversationKeyOf(request.headers, body.prompt_cache_key)
    const lane = yield* laneOf(request.headers)
    const role = yield* readyModel(body.model)
    const { retryAfterSeconds } = yield* HttpConfig
    const errors: ErrorContext = { params: mapped.params, key: key.source, retryAfterSeconds }
    const stream = yield* generation({ ...mapped.request, ...(lane === undefined ? {} : { lane }) }, key.key)
    return { errors, model: role.model, stream }
  })

const idOf = (prefix: string) => `${prefix}-${Crypto.randomUUID().replace(/-/g, "").slice(0, 24)}`

const chatCompletions = Effect.fn("OpenAi.chatCompletions")(
  function*(request: HttpServerRequest.HttpServerRequest) {
    const body = yield* readJson(ChatCompletionRequest)
    const mapped = yield* chatRequest(body)
    const { errors, model, stream } = yield* start(request, body, mapped)
    const meta = {
      id: idOf("chatcmpl"),
      created: Math.floor((yield* Clock.currentTimeMillis) / 1000),
      model,
      forcedToolCall: mapped.forcedToolCall,
      logprobs: body.logprobs === true
    }
    if (body.stream === true) {
      const events = chatStream(meta, body.stream_options?.include_usage === true)
      return yield* runStreamed(stream, [events.start], events.next, errors)
    }
    const { chunks, done } = yield* runWhole(stream, errors)
    return HttpServerResponse.unsafeJson(chatCompletion(meta, chunks, done))
  },
  answerRefusals
)

const completions = Effect.fn("OpenAi.completions")(
  function*(request: HttpServerRequest.HttpServerRequest) {
    const body = yield* readJson(CompletionRequest)
    const mapped = yield* completionRequest(body)
    const { errors, model, stream } = yield* start(request, body, mapped)
    const meta = {
      id: idOf("cmpl"),
      created: Math.floor((yield* Clock.currentTimeMillis) / 1000),
      model,
      logprobs: body.logprobs !== null && body.logprobs !== undefined
    }
    if (body.stream === true) {
      return yield* runStreamed(stream, [], completionStream(meta, body.stream_options?.include_usage === true), errors)
    }
    const { chunks, done } = yield* runWhole(stream, errors)
    return HttpServerResponse.unsafeJson(completion(meta, chunks, done))
  },
  answerRefusals
)

const models = Effect.withSpan(Effect.gen(function*() {
  const readiness = yield* (yield* Provider).readiness
  const role = generationModel(readiness)
  const now = yield* Clock.currentTimeMillis
  return HttpServerResponse.unsafeJson({ object: "list", data: role === undefined ? [] : [modelObject(role, readiness, now)] })
}), "OpenAi.models")

const model = Effect.withSpan(answerRefusals(Effect.gen(function*() {
  const { id } = yield* HttpRouter.params
  const readiness = yield* (yield* Provider).readiness
  const role = generationModel(readiness)
  if (role === undefined || role.model !== id) return yield* refused(modelNotFound(id ?? ""))
  return HttpServerResponse.unsafeJson(modelObject(role, readiness, yield* Clock.currentTimeMillis))
})), "OpenAi.model")

export const routes = HttpLayerRouter.addAll([
  HttpLayerRouter.route("GET", "/v1/models", models),
  HttpLayerRouter.route("GET", "/v1/models/:id", model),
  HttpLayerRouter.route("POST", "/v1/chat/completions", chatCompletions),
  HttpLayerRouter.route("POST", "/v1/completions", completions)
])
