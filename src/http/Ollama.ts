/**
 * Ollama's API under `/api`: chat, generate (newline-delimited JSON streams or whole), tags, ps,
 * show and version, over the Provider (through KeyedConversations for continuation reuse), with
 * Ollama's field names; the endpoints that do not map answer 501 saying why. Every error is a
 * Refusal in Ollama's shape `{"error": "..."}`; a failure after a stream began is its last line.
 * What maps and what does not: docs/decisions.md, "Ollama's API".
 */
import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Chunk from "effect/Chunk"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import type { GenerateChunk } from "../domain/Inference.js"
import { packageVersion } from "../internal/PackageFiles.js"
import type { ProviderError } from "../services/ProviderError.js"
import * as ErrorBodies from "./ErrorBodies.js"
import { HttpConfig } from "./HttpConfig.js"
import { ndjson, started } from "./EventStream.js"
import * as JsonBody from "./JsonBody.js"
import { KeyedConversations } from "./KeyedConversations.js"
import * as Models from "./ollama/Models.js"
import * as Replies from "./ollama/Replies.js"
import * as Requests from "./ollama/Requests.js"
import * as Unsupported from "./ollama/Unsupported.js"
import * as Wire from "./ollama/Wire.js"
import { badRequest, type Refusal, refusalOf } from "./Refusals.js"

/** How long Ollama says a model kept loaded forever stays: its `time.Now() + math.MaxInt64` nanoseconds. */
const foreverMillis = 9_223_372_036_854

const now = Effect.map(Clock.currentTimeMillis, (millis) => new Date(millis).toISOString())

const makeRoutes = Effect.gen(function*() {
  const conversations = yield* KeyedConversations
  const models = yield* Models.OllamaModels
  const { retryAfterSeconds } = yield* HttpConfig

  /** A Provider error as Ollama's clients should read it (InvalidRequest names their field). */
  const refusalOfProvider = (error: ProviderError): Refusal => {
    if (error._tag !== "InvalidRequest") return refusalOf(error, retryAfterSeconds)
    const field = Requests.ollamaField(error.field)
    return badRequest(`invalid ${field} ${error.value}: ${error.reason}`, field)
  }

  /** Answers a refusal in Ollama's shape. */
  const answering = <R>(handler: Effect.Effect<HttpServerResponse.HttpServerResponse, Refusal, R>) =>
    Effect.catchAll(handler, (refusal) => Effect.succeed(ErrorBodies.ollama(refusal)))

  /** The model a chat or generate request names, refused (Ollama's words) when it cannot do `what`. */
  const modelFor = (requested: string, what: "chat" | "generate", think: Wire.Think | undefined, tools: boolean) =>
    Effect.gen(function*() {
      if (requested === "") return yield* Effect.fail(badRequest("model is required", "model"))
      const model = yield* models.resolve(requested, { ready: true })
      const capabilities = Models.capabilitiesOf(model, yield* models.file(model))
      const missing = !capabilities.includes("completion")
        ? what
        : think === true && !capabilities.includes("thinking")
        ? "thinking"
        : tools && !capabilities.includes("tools")
        ? "tools"
        : undefined
      if (missing !== undefined) return yield* Effect.fail(badRequest(`"${requested}" does not support ${missing}`, "model"))
      return model
    })

  /** The reply to a generation: a stream of lines (after its first chunk), or one object. */
  const reply = (shape: Replies.Shape, model: string, stream: boolean, chunks: Stream.Stream<GenerateChunk, ProviderError>) =>
    stream
      ? Effect.gen(function*() {
        const lines = Replies.streamLines(shape, model)
        const whole = yield* Effect.mapError(started(chunks), refusalOfProvider)
        return ndjson(
          whole.pipe(Stream.mapChunksEffect((chunk) => Effect.map(now, (at) => Chunk.map(chunk, (c) => lines(c, at))))),
          { onFailure: (error) => ({ error: refusalOfProvider(error).message }) }
        )
      })
      : Effect.gen(function*() {
        const all = yield* Effect.mapError(Stream.runCollect(chunks), refusalOfProvider)
        const whole = Replies.wholeReply(shape, model, all, yield* now)
        if (whole === undefined) return yield* Effect.dieMessage("a generation ended without its Done chunk")
        return HttpServerResponse.unsafeJson(whole)
      })

  /** The body decoded with `schema`; an empty one is Ollama's "missing request body". */
  const readJson = <A, I>(schema: Schema.Schema<A, I>) =>
    Effect.mapError(JsonBody.readJson(schema, { emptyBody: "missing request body" }), (refused) => refused.refusal)

  const conversationKey = Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => Requests.conversationKeyOf(request.headers))

  const chat = answering(Effect.gen(function*() {
    const body = yield* readJson(Wire.ChatRequest)
    yield* modelFor(body.model, "chat", body.think, (body.tools?.length ?? 0) > 0)
    if ((body.messages ?? []).length === 0) {
      yield* Requests.checkLoadOnly(body.keep_alive)
      return HttpServerResponse.unsafeJson({
        model: body.model,
        created_at: yield* now,
        message: { role: "assistant", content: "" },
        done: true,
        done_reason: "load"
      })
    }
    const request = yield* Requests.chatRequest(body)
    const key = yield* conversationKey
    return yield* reply(Replies.chat, body.model, body.stream ?? true, conversations.generate(key, request))
  }))

  const generate = answering(Effect.gen(function*() {
    const body = yield* readJson(Wire.GenerateRequest)
    yield* modelFor(body.model, "generate", body.think, false)
    const prompt = body.prompt ?? ""
    if (prompt === "") {
      yield* Requests.checkLoadOnly(body.keep_alive)
      return HttpServerResponse.unsafeJson({ model: body.model, created_at: yield* now, response: "", done: true, done_reason: "load" })
    }
    const request = yield* Requests.generateRequest({ ...body, prompt })
    const key = yield* conversationKey
    return yield* reply(Replies.generate, body.model, body.stream ?? true, conversations.generate(key, request))
  }))

  const tags = answering(Effect.gen(function*() {
    const { models: loaded } = yield* models.loaded
    const listed = yield* Effect.forEach(loaded, (model) =>
      Effect.gen(function*() {
        const file = yield* models.file(model)
        return {
          name: model.name,
          model: model.name,
          modified_at: file.modifiedAt.toISOString(),
          size: file.size,
          digest: yield* models.digest(model),
          details: file.details
        }
      }))
    return HttpServerResponse.unsafeJson({ models: listed })
  }))

  const ps = answering(Effect.gen(function*() {
    const { gpu, models: loaded } = yield* models.loaded
    const expiresAt = new Date((yield* Clock.currentTimeMillis) + foreverMillis).toISOString()
    const listed = yield* Effect.forEach(loaded, (model) =>
      Effect.gen(function*() {
        const file = yield* models.file(model)
        return {
          name: model.name,
          model: model.name,
          size: file.size,
          digest: yield* models.digest(model),
          details: file.details,
          expires_at: expiresAt,
          size_vram: gpu ? file.size : 0,
          context_length: model.admittedContext ?? 0
        }
      }))
    return HttpServerResponse.unsafeJson({ models: listed })
  }))

  const show = answering(Effect.gen(function*() {
    const body = yield* readJson(Wire.ShowRequest)
    const requested = body.model ?? body.name
    if (requested === undefined || requested === "") return yield* Effect.fail(badRequest("model is required", "model"))
    const model = yield* models.resolve(requested, { ready: false })
    const file = yield* models.file(model)
    return HttpServerResponse.unsafeJson({
      ...(file.license === undefined ? {} : { license: file.license }),
      parameters: "",
      template: file.template,
      details: file.details,
      model_info: file.modelInfo,
      capabilities: Models.capabilitiesOf(model, file),
      modified_at: file.modifiedAt.toISOString()
    })
  }))

  const version = Effect.sync(() => HttpServerResponse.unsafeJson({ version: packageVersion() }))

  return [
    HttpLayerRouter.route("POST", "/api/chat", chat),
    HttpLayerRouter.route("POST", "/api/generate", generate),
    HttpLayerRouter.route("GET", "/api/tags", tags),
    HttpLayerRouter.route("GET", "/api/ps", ps),
    HttpLayerRouter.route("POST", "/api/show", show),
    HttpLayerRouter.route("GET", "/api/version", version),
    ...Unsupported.endpoints.map(([path, reason]) =>
      HttpLayerRouter.route("*", path, Effect.succeed(ErrorBodies.ollama(Unsupported.refusal(reason))))
    )
  ]
})

export const routes = HttpLayerRouter.addAll(makeRoutes).pipe(Layer.provide(Models.layer))
