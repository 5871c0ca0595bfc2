/**
 * The HTTP server's own work, on the real server layer (Node server, gate, router): the address
 * parser and the limits' configuration; the API key; the body limit and the JSON body reader; the
 * in-flight limit and its release when a client goes away; event streams; slow clients and the
 * connection limit. Most tests serve test routes without a runtime (`Http.serve` with routes of
 * this file: a server costs nothing to start, so each test that needs other limits has its own);
 * one runtime serves every route on a Unix socket behind a key.
 */
import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import * as HttpServerTag from "@effect/platform/HttpServer"
import * as Headers from "@effect/platform/Headers"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { assert, describe, it, layer } from "@effect/vitest"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as FastCheck from "effect/FastCheck"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as Http from "node:http"
import * as Net from "node:net"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as ApiKey from "../../src/http/ApiKey.js"
import * as ErrorBodies from "../../src/http/ErrorBodies.js"
import * as EventStream from "../../src/http/EventStream.js"
import { formatListen, HttpConfig, type HttpConfigShape, isLoopback, type Listen, parseListen } from "../../src/http/HttpConfig.js"
import { InFlight } from "../../src/http/InFlight.js"
import * as JsonBody from "../../src/http/JsonBody.js"
import * as Server from "../../src/http/Server.js"
import { HttpTest } from "./support.js"

// --- test routes and a server without a runtime ---------------------------------------------

const Chat = Schema.Struct({
  messages: Schema.Array(Schema.Struct({ role: Schema.Literal("system", "user", "assistant"), content: Schema.String }))
})

/** What the test routes let a test watch. */
interface Probes {
  /** Requests that reached the echo route. */
  started: number
  /** Completed when a held stream's or handler's finalizer ran (one per hold, in order). */
  readonly released: Array<Deferred.Deferred<void>>
}

const hold = (probes: Probes) => Effect.tap(Deferred.make<void>(), (released) => Effect.sync(() => probes.released.push(released)))

const testRoutes = (probes: Probes) =>
  HttpLayerRouter.addAll([
    ...["/v1/echo", "/api/echo"].map((path) =>
      HttpLayerRouter.route("POST", path as `/${string}`, (request) =>
        Effect.gen(function*() {
          probes.started++
          const body = yield* JsonBody.readJson(Chat)
          return HttpServerResponse.unsafeJson(body)
        }).pipe(Effect.catchTag("BodyRefused", (e) => Effect.succeed(ErrorBodies.forPath(request.url, e.refusal)))))
    ),
    // One event, then nothing until the client goes away.
    HttpLayerRouter.route("GET", "/v1/hold-stream", Effect.map(hold(probes), (released) =>
      EventStream.serverSentEvents(
        Stream.concat(Stream.succeed({ n: 1 }), Stream.never).pipe(Stream.ensuring(Deferred.succeed(released, undefined))),
        { onFailure: () => null }
      ))),
    // A handler that never answers.
    HttpLayerRouter.route("GET", "/v1/hold-handler", Effect.flatMap(hold(probes), (released) =>
      Effect.never.pipe(Effect.ensuring(Deferred.succeed(released, undefined))))),
    HttpLayerRouter.route("GET", "/v1/events", EventStream.serverSentEvents(Stream.make({ n: 1 }, { n: 2 }), { onFailure: () => null })),
    HttpLayerRouter.route("GET", "/v1/events-failing", EventStream.serverSentEvents(
      Stream.concat(Stream.succeed({ n: 1 }), Stream.fail("the engine went away")),
      { onFailure: (message) => ({ error: { message, type: "server_error", code: "engine_failed" } }) }
    )),
    HttpLayerRouter.route("GET", "/api/lines-failing", EventStream.ndjson(
      Stream.concat(Stream.make({ n: 1 }, { n: 2 }), Stream.fail("the engine went away")),
      { onFailure: (error) => ({ error }) }
    )),
    HttpLayerRouter.route("GET", "/health", HttpServerResponse.unsafeJson({ status: "ok" }))
  ])

const testConfig = (http: Partial<HttpConfigShape>): HttpConfigShape => ({
  ...HttpConfig.defaults,
  listen: { _tag: "Tcp", host: "127.0.0.1", port: 0 },
  ...http
})

/** A server of the test routes in the current scope. */
const testServer = (http: Partial<HttpConfigShape> = {}) =>
  Effect.gen(function*() {
    const probes: Probes = { started: 0, released: [] }
    const config = testConfig(http)
    const context = yield* Layer.build(Server.serve(config, testRoutes(probes)))
    const { address } = yield* Effect.provide(HttpServerTag.HttpServer, context)
    const inFlight = yield* Effect.provide(InFlight, context)
    const port = address._tag === "TcpAddress" ? address.port : 0
    return { baseUrl: `http://127.0.0.1:${port}`, port, probes, inFlight, config }
  })

const fetchIn = (url: string, init?: RequestInit) => Effect.promise(() => fetch(url, init))
const jsonOf = (response: Response) => Effect.promise(() => response.json() as Promise<unknown>)
const textOf = (response: Response) => Effect.promise(() => response.text())

/** What a streamed response sent, read until it includes `text` (the reader stays locked: the body is the test's). */
const readUntil = (response: Response, text: string) =>
  Effect.promise(async () => {
    const reader = response.body!.getReader()
    const decoder = new TextDecoder()
    let received = ""
    while (!received.includes(text)) {
      const { done, value } = await reader.read()
      if (done) break
      received += decoder.decode(value, { stream: true })
    }
    reader.releaseLock()
    return received
  })

/** Polls (bounded) until `check` holds: for counts that settle after a client went away. */
const eventually = <A>(read: Effect.Effect<A>, check: (a: A) => boolean, what: string) =>
  read.pipe(
    Effect.filterOrFail(check, (a) => `${what}: still ${String(a)}`),
    Effect.retry(Schedule.spaced("10 millis").pipe(Schedule.upTo("5 seconds"))),
    Effect.orDie
  )

/** A raw connection that writes `text` and collects what the server sends until it closes; with how long that took. */
const rawUntilClosed = (port: number, text: string) =>
  Effect.async<{ readonly received: string; readonly millis: number }>((resume) => {
    const started = performance.now()
    let received = ""
    const socket = Net.createConnection({ host: "127.0.0.1", port }, () => socket.write(text))
    socket.setEncoding("utf8").on("data", (chunk: string) => (received += chunk))
    socket.on("error", () => {})
    socket.on("close", () => resume(Effect.succeed({ received, millis: performance.now() - started })))
    return Effect.sync(() => socket.destroy())
  })

// --- configuration ---------------------------------------------------------------------------

describe("HTTP configuration", () => {
  it("parseListen reads HOST:PORT, [IPv6]:PORT, :PORT, PORT and socket paths", () => {
    const ok = (text: string) => Either.getOrThrow(parseListen(text))
    assert.deepStrictEqual(ok("0.0.0.0:8080"), { _tag: "Tcp", host: "0.0.0.0", port: 8080 })
    assert.deepStrictEqual(ok("localhost:11434"), { _tag: "Tcp", host: "localhost", port: 11434 })
    assert.deepStrictEqual(ok("[::1]:0"), { _tag: "Tcp", host: "::1", port: 0 })
    assert.deepStrictEqual(ok(":9000"), { _tag: "Tcp", host: "127.0.0.1", port: 9000 })
    assert.deepStrictEqual(ok("9000"), { _tag: "Tcp", host: "127.0.0.1", port: 9000 })
    assert.deepStrictEqual(ok("/run/user/1000/nativegen/http.sock"), { _tag: "Unix", path: "/run/user/1000/nativegen/http.sock" })
    assert.deepStrictEqual(ok("./http.sock"), { _tag: "Unix", path: "./http.sock" })
  })

  it("parseListen names the text and the fault otherwise", () => {
    const fault = (text: string) => Either.flip(parseListen(text)).pipe(Either.getOrThrow).message
    assert.strictEqual(fault("127.0.0.1:65536"), `invalid HTTP address "127.0.0.1:65536": the port 65536 is over 65535`)
    assert.strictEqual(fault("host:http"), `invalid HTTP address "host:http": the port "http" is not a number from 0 to 65535`)
    assert.strictEqual(fault(""), `invalid HTTP address "": the port "" is not a number from 0 to 65535`)
    assert.strictEqual(fault("::1:8080"), `invalid HTTP address "::1:8080": an IPv6 address goes in brackets: [::1]:PORT`)
    assert.strictEqual(fault("[localhost]:80"), `invalid HTTP address "[localhost]:80": "localhost" in brackets is not an IPv6 address`)
    assert.strictEqual(fault("a b:80"), `invalid HTTP address "a b:80": "a b" is not a host name or an IPv4 address`)
    assert.strictEqual(fault("-1"), `invalid HTTP address "-1": the port "-1" is not a number from 0 to 65535`)
    assert.strictEqual(
      fault("http://127.0.0.1:8080"),
      `invalid HTTP address "http://127.0.0.1:8080": give HOST:PORT (e.g. 127.0.0.1:8080) or a socket path, not a URL`
    )
  })

  const tcp = FastCheck.record({
    host: FastCheck.oneof(FastCheck.ipV4(), FastCheck.ipV6(), FastCheck.domain()),
    port: FastCheck.integer({ min: 0, max: 65535 })
  }).map((a): Listen => ({ _tag: "Tcp", ...a }))

  it.prop("every TCP address reads back from its text", [tcp], ([listen]) => {
    assert.deepStrictEqual(Either.getOrThrow(parseListen(formatListen(listen))), listen)
  })

  it.prop("a port over 65535 is refused on any host", [FastCheck.ipV4(), FastCheck.integer({ min: 65536, max: 99999 })], ([host, port]) => {
    assert.isTrue(Either.isLeft(parseListen(`${host}:${port}`)))
  })

  it("isLoopback: 127.0.0.0/8, ::1, localhost and sockets; not 0.0.0.0, ::, or other addresses", () => {
    const at = (text: string) => isLoopback(Either.getOrThrow(parseListen(text)))
    for (const text of ["127.0.0.1:1", "127.4.5.6:1", "[::1]:1", "localhost:1", "[::ffff:127.0.0.1]:1", "/tmp/x.sock", "8080"]) {
      assert.isTrue(at(text), text)
    }
    for (const text of ["0.0.0.0:1", "[::]:1", "192.168.1.2:1", "example.com:1", "[::ffff:10.0.0.1]:1"]) assert.isFalse(at(text), text)
  })

  it.effect("the limits come from NATIVEGEN_HTTP_*, durations as text; a headers timeout over the request's is refused", () =>
    Effect.gen(function*() {
      const read = (env: Record<string, string>) =>
        Effect.withConfigProvider(HttpConfig.config, ConfigProvider.fromMap(new Map(Object.entries(env))))
      const limits = yield* read({
        NATIVEGEN_HTTP_MAX_BODY_BYTES: "1000",
        NATIVEGEN_HTTP_MAX_CONNECTIONS: "3",
        NATIVEGEN_HTTP_MAX_IN_FLIGHT: "2",
        NATIVEGEN_HTTP_HEADERS_TIMEOUT: "2 seconds",
        NATIVEGEN_HTTP_REQUEST_TIMEOUT: "2500 millis",
        NATIVEGEN_HTTP_RETRY_AFTER_SECONDS: "0"
      })
      assert.deepStrictEqual(limits, {
        maxBodyBytes: 1000,
        maxConnections: 3,
        maxInFlight: 2,
        headersTimeoutMillis: 2000,
        requestTimeoutMillis: 2500,
        retryAfterSeconds: 0
      })
      const { apiKey: _, listen: __, ...defaults } = HttpConfig.defaults
      assert.deepStrictEqual(yield* read({}), defaults)
      const inverted = yield* Effect.flip(read({ NATIVEGEN_HTTP_HEADERS_TIMEOUT: "1 minute" }))
      assert.include(String(inverted), "NATIVEGEN_HTTP_HEADERS_TIMEOUT must not be longer than NATIVEGEN_HTTP_REQUEST_TIMEOUT")
      const zero = yield* Effect.flip(read({ NATIVEGEN_HTTP_MAX_IN_FLIGHT: "0" }))
      assert.include(String(zero), "NATIVEGEN_HTTP_MAX_IN_FLIGHT must be a whole number of at least 1")
    }))
})

describe("API key check", () => {
  const key = Redacted.make("sk-local-123")
  const check = ApiKey.make(key)

  it("a Bearer token or x-api-key; another scheme or no header is not a key", () => {
    assert.strictEqual(check(Headers.fromInput({ authorization: "Bearer sk-local-123" })), "accepted")
    assert.strictEqual(check(Headers.fromInput({ authorization: "bearer   sk-local-123 " })), "accepted")
    assert.strictEqual(check(Headers.fromInput({ "x-api-key": "sk-local-123" })), "accepted")
    assert.strictEqual(check(Headers.fromInput({})), "missing")
    assert.strictEqual(check(Headers.fromInput({ authorization: "Basic c2stbG9jYWwtMTIz" })), "wrong")
    assert.strictEqual(check(Headers.fromInput({ authorization: "Bearer sk-local-12" })), "wrong")
    assert.strictEqual(check(Headers.fromInput({ authorization: "Bearer" })), "wrong")
  })

  it.prop("accepts exactly the configured key", [FastCheck.string({ minLength: 1 }), FastCheck.string()], ([configured, sent]) => {
    const verdict = ApiKey.make(Redacted.make(configured.trim() === "" ? "k" : configured.trim()))(Headers.fromInput({ "x-api-key": sent }))
    const expected = sent.trim() === (configured.trim() === "" ? "k" : configured.trim())
    assert.strictEqual(verdict, expected ? "accepted" : "wrong")
  })
})

describe("JSON body", () => {
  it("a Schema issue's path names the field as a client writes it", () => {
    assert.strictEqual(JsonBody.paramOf(["messages", 1, "content"]), "messages[1].content")
    assert.strictEqual(JsonBody.paramOf(["model"]), "model")
    assert.strictEqual(JsonBody.paramOf([]), null)
  })
})

// --- the gate, bodies and streams on a server ----------------------------------------------

describe("HTTP server limits", () => {
  it.live("a declared body over the limit is 413 in the API's shape, and the route never runs", () =>
    Effect.gen(function*() {
      const server = yield* testServer({ maxBodyBytes: 64 })
      const big = JSON.stringify({ messages: [{ role: "user", content: "x".repeat(100) }] })
      const openAi = yield* fetchIn(`${server.baseUrl}/v1/echo`, { method: "POST", body: big })
      assert.strictEqual(openAi.status, 413)
      assert.deepStrictEqual(yield* jsonOf(openAi), {
        error: {
          message: `the request body of ${big.length} bytes is over the limit of 64 bytes (NATIVEGEN_HTTP_MAX_BODY_BYTES)`,
          type: "invalid_request_error",
          param: null,
          code: "body_too_large"
        }
      })
      const ollama = yield* fetchIn(`${server.baseUrl}/api/echo`, { method: "POST", body: big })
      assert.strictEqual(ollama.status, 413)
      assert.deepStrictEqual(yield* jsonOf(ollama), {
        error: `the request body of ${big.length} bytes is over the limit of 64 bytes (NATIVEGEN_HTTP_MAX_BODY_BYTES)`
      })
      assert.strictEqual(server.probes.started, 0)
      // At the limit it is read.
      const frame = JSON.stringify({ messages: [{ role: "user", content: "" }] })
      const fits = JSON.stringify({ messages: [{ role: "user", content: "x".repeat(64 - frame.length) }] })
      assert.strictEqual(fits.length, 64)
      const ok = yield* fetchIn(`${server.baseUrl}/v1/echo`, { method: "POST", body: fits })
      assert.strictEqual(ok.status, 200)
      assert.deepStrictEqual(yield* jsonOf(ok), JSON.parse(fits))
    }).pipe(Effect.scoped))

  it.live("a body sent without a length is held to the limit: 413 naming its size once it is sent, nothing decoded", () =>
    Effect.gen(function*() {
      const server = yield* testServer({ maxBodyBytes: 64 })
      const chunk = `${JSON.stringify("x".repeat(30))}\r\n`
      const request = "POST /v1/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
        `${chunk.length.toString(16)}\r\n${chunk}\r\n`.repeat(3) + "0\r\n\r\n"
      const { received } = yield* rawUntilClosed(server.port, request)
      assert.match(received, /^HTTP\/1\.1 413 /)
      assert.include(received, `"code":"body_too_large"`)
      assert.include(received, `the request body of ${3 * chunk.length} bytes is over the limit of 64 bytes`)
      assert.strictEqual(server.probes.started, 1)
    }).pipe(Effect.scoped))

  it.live("bad JSON and a body that is not the schema are 400 naming the field", () =>
    Effect.gen(function*() {
      const server = yield* testServer()
      const post = (path: string, body: string) => fetchIn(`${server.baseUrl}${path}`, { method: "POST", body })
      const notJson = yield* post("/v1/echo", "{\"messages\": [")
      assert.strictEqual(notJson.status, 400)
      const notJsonBody = (yield* jsonOf(notJson)) as { error: { code: string; message: string; param: unknown } }
      assert.strictEqual(notJsonBody.error.code, "invalid_json")
      assert.match(notJsonBody.error.message, /^the request body is not valid JSON: /)
      const empty = yield* post("/v1/echo", "")
      assert.deepStrictEqual(yield* jsonOf(empty), {
        error: { message: "the request body is empty: expected JSON", type: "invalid_request_error", param: null, code: "invalid_json" }
      })
      const wrongRole = yield* post("/v1/echo", JSON.stringify({ messages: [{ role: "user", content: "a" }, { role: "robot", content: "b" }] }))
      assert.strictEqual(wrongRole.status, 400)
      const wrong = (yield* jsonOf(wrongRole)) as { error: { code: string; message: string; param: unknown } }
      assert.strictEqual(wrong.error.param, "messages[1].role")
      assert.strictEqual(wrong.error.code, "invalid_value")
      assert.strictEqual(wrong.error.message, `invalid messages[1].role: Expected "system" | "user" | "assistant", actual "robot"`)
      const missing = yield* post("/api/echo", JSON.stringify({ messages: [{ role: "user" }] }))
      assert.deepStrictEqual(yield* jsonOf(missing), { error: "invalid messages[0].content: is missing" })
      const notUtf8 = yield* fetchIn(`${server.baseUrl}/v1/echo`, { method: "POST", body: new Uint8Array([0x7b, 0xff, 0x7d]) })
      assert.strictEqual(((yield* jsonOf(notUtf8)) as { error: { message: string } }).error.message, "the request body is not UTF-8 text")
      // Fields the schema does not name are ignored.
      const extra = yield* post("/v1/echo", JSON.stringify({ messages: [], model: "m", stream: false }))
      assert.deepStrictEqual(yield* jsonOf(extra), { messages: [] })
    }).pipe(Effect.scoped))

  it.live("one request over the in-flight limit is 429 with Retry-After; a client that goes away interrupts its stream or handler and frees its place", () =>
    Effect.gen(function*() {
      const server = yield* testServer({ maxInFlight: 2, retryAfterSeconds: 3 })
      const stream = new AbortController()
      const handler = new AbortController()
      const streaming = yield* fetchIn(`${server.baseUrl}/v1/hold-stream`, { signal: stream.signal })
      assert.strictEqual(yield* readUntil(streaming, `data: {"n":1}\n\n`), `:\n\ndata: {"n":1}\n\n`)
      // The handler that never answers holds its place too.
      const pending = yield* Effect.fork(
        Effect.promise(() => fetch(`${server.baseUrl}/v1/hold-handler`, { signal: handler.signal }).catch(() => null))
      )
      yield* eventually(server.inFlight.current, (n) => n === 2, "requests in flight")
      const refused = yield* fetchIn(`${server.baseUrl}/v1/events`)
      assert.strictEqual(refused.status, 429)
      assert.strictEqual(refused.headers.get("retry-after"), "3")
      assert.deepStrictEqual(yield* jsonOf(refused), {
        error: {
          message: "the server is already handling its limit of 2 requests (NATIVEGEN_HTTP_MAX_IN_FLIGHT); retry after 3 s",
          type: "rate_limit_error",
          param: null,
          code: "too_many_requests"
        }
      })
      const ollama = yield* fetchIn(`${server.baseUrl}/api/echo`, { method: "POST", body: "{}" })
      assert.strictEqual(ollama.status, 429)
      assert.deepStrictEqual(yield* jsonOf(ollama), {
        error: "the server is already handling its limit of 2 requests (NATIVEGEN_HTTP_MAX_IN_FLIGHT); retry after 3 s"
      })
      // The health check does no work: it answers whatever the load.
      assert.strictEqual((yield* fetchIn(`${server.baseUrl}/health`)).status, 200)
      // The clients go away: the stream and the handler are interrupted, and their places freed.
      stream.abort()
      handler.abort()
      yield* Effect.forEach(server.probes.released, Deferred.await)
      yield* eventually(server.inFlight.current, (n) => n === 0, "requests in flight")
      assert.isNull(yield* Fiber.join(pending))
      assert.strictEqual((yield* fetchIn(`${server.baseUrl}/v1/events`)).status, 200)
      assert.strictEqual(yield* server.inFlight.current, 0)
    }).pipe(Effect.scoped))

  it.live("event streams: SSE with an opening comment and [DONE]; a failure mid-stream as a last event; NDJSON with an error line", () =>
    Effect.gen(function*() {
      const server = yield* testServer()
      const events = yield* fetchIn(`${server.baseUrl}/v1/events`)
      assert.strictEqual(events.headers.get("content-type"), "text/event-stream")
      assert.strictEqual(events.headers.get("cache-control"), "no-cache")
      assert.strictEqual(events.headers.get("x-accel-buffering"), "no")
      assert.strictEqual(yield* textOf(events), `:\n\ndata: {"n":1}\n\ndata: {"n":2}\n\ndata: [DONE]\n\n`)
      const failing = yield* fetchIn(`${server.baseUrl}/v1/events-failing`)
      assert.strictEqual(failing.status, 200)
      assert.strictEqual(
        yield* textOf(failing),
        `:\n\ndata: {"n":1}\n\ndata: {"error":{"message":"the engine went away","type":"server_error","code":"engine_failed"}}\n\n`
      )
      const lines = yield* fetchIn(`${server.baseUrl}/api/lines-failing`)
      assert.strictEqual(lines.headers.get("content-type"), "application/x-ndjson")
      assert.strictEqual(yield* textOf(lines), `{"n":1}\n{"n":2}\n{"error":"the engine went away"}\n`)
    }).pipe(Effect.scoped))

  it.live("the API key: 401 with WWW-Authenticate in the API's shape without it or with a wrong one; /health is open", () =>
    Effect.gen(function*() {
      const server = yield* testServer({ apiKey: Redacted.make("sk-local-123") })
      const missing = yield* fetchIn(`${server.baseUrl}/v1/events`)
      assert.strictEqual(missing.status, 401)
      assert.strictEqual(missing.headers.get("www-authenticate"), "Bearer")
      assert.deepStrictEqual(yield* jsonOf(missing), {
        error: {
          message: "this server needs an API key: send it as `Authorization: Bearer <key>`",
          type: "authentication_error",
          param: null,
          code: "invalid_api_key"
        }
      })
      const wrong = yield* fetchIn(`${server.baseUrl}/api/echo`, { method: "POST", body: "{}", headers: { authorization: "Bearer nope" } })
      assert.strictEqual(wrong.status, 401)
      assert.deepStrictEqual(yield* jsonOf(wrong), { error: "the API key is not valid" })
      // Refused before the route: nothing read, nothing run, no place taken.
      assert.strictEqual(server.probes.started, 0)
      // An unknown path needs the key as well (it tells nothing about what exists).
      assert.strictEqual((yield* fetchIn(`${server.baseUrl}/v1/nothing-here`)).status, 401)
      const bearer = yield* fetchIn(`${server.baseUrl}/v1/events`, { headers: { authorization: "Bearer sk-local-123" } })
      assert.strictEqual(bearer.status, 200)
      const header = yield* fetchIn(`${server.baseUrl}/v1/events`, { headers: { "x-api-key": "sk-local-123" } })
      assert.strictEqual(header.status, 200)
      assert.strictEqual((yield* fetchIn(`${server.baseUrl}/health`)).status, 200)
      assert.strictEqual((yield* fetchIn(`${server.baseUrl}/health?x=1`)).status, 200)
    }).pipe(Effect.scoped))

  it.live("a browser's request from another origin's page is 403 before anything runs; the server's own origin and clients without Origin pass", () =>
    Effect.gen(function*() {
      const server = yield* testServer()
      const post = (headers: Record<string, string>) =>
        fetchIn(`${server.baseUrl}/api/echo`, { method: "POST", body: "{}", headers: { "content-type": "text/plain", ...headers } })
      const forged = yield* post({ origin: "http://evil.example" })
      assert.strictEqual(forged.status, 403)
      assert.deepStrictEqual(yield* jsonOf(forged), {
        error: "requests from web pages of other origins are refused (Origin http://evil.example): " +
          "only the server's own pages (the console) may call it from a browser"
      })
      const opaque = yield* fetchIn(`${server.baseUrl}/v1/events`, { headers: { origin: "null" } })
      assert.strictEqual(opaque.status, 403)
      assert.strictEqual(((yield* jsonOf(opaque)) as { error: { code: string } }).error.code, "cross_origin")
      assert.strictEqual(server.probes.started, 0)
      assert.notStrictEqual((yield* post({ origin: server.baseUrl })).status, 403)
      assert.notStrictEqual((yield* post({})).status, 403)
    }).pipe(Effect.scoped))
})

describe("HTTP slow clients and connections", () => {
  it.live("closing the server does not wait on a stream: after a grace its connection is closed and the stream interrupted", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const server = yield* Scope.extend(testServer(), scope)
      const response = yield* fetchIn(`${server.baseUrl}/v1/hold-stream`)
      yield* readUntil(response, `data: {"n":1}\n\n`)
      const started = performance.now()
      yield* Scope.close(scope, Exit.void)
      const millis = performance.now() - started
      yield* Deferred.await(server.probes.released[0]!)
      yield* eventually(server.inFlight.current, (n) => n === 0, "requests in flight")
      // The grace (2 s), then the connection is cut.
      assert.isAtLeast(millis, 1_900)
      assert.isBelow(millis, 5_000)
      const rest = yield* Effect.promise(() => response.body!.getReader().read().then((r) => r.done, () => "cut"))
      assert.include([true, "cut"], rest)
    }))


  it.live("a client that sends half its headers and waits is cut off after the headers timeout (408)", () =>
    Effect.gen(function*() {
      const server = yield* testServer({ headersTimeoutMillis: 300, requestTimeoutMillis: 2_000 })
      const { received, millis } = yield* rawUntilClosed(server.port, "GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n")
      assert.match(received, /^HTTP\/1\.1 408 Request Timeout/)
      assert.isAtLeast(millis, 250)
      // Node checks every quarter of the shortest timeout: cut off well before the request timeout.
      assert.isBelow(millis, 1_500)
    }).pipe(Effect.scoped))

  it.live("a client that sends its headers and part of the body is cut off after the request timeout (408)", () =>
    Effect.gen(function*() {
      const server = yield* testServer({ headersTimeoutMillis: 300, requestTimeoutMillis: 600 })
      const { received, millis } = yield* rawUntilClosed(
        server.port,
        "POST /v1/echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{\"messages\""
      )
      assert.match(received, /^HTTP\/1\.1 408 Request Timeout/)
      assert.isAtLeast(millis, 550)
      assert.isBelow(millis, 3_000)
    }).pipe(Effect.scoped))

  it.live("an address in use fails the layer with an error naming it", () =>
    Effect.gen(function*() {
      const first = yield* testServer()
      const second = yield* Effect.flip(testServer({ listen: { _tag: "Tcp", host: "127.0.0.1", port: first.port } }))
      assert.strictEqual(second._tag, "HttpListenFailed")
      assert.match(second.message, new RegExp(`^cannot serve HTTP on 127\\.0\\.0\\.1:${first.port}: listen EADDRINUSE`))
    }).pipe(Effect.scoped))

  it.live("connections over the limit are closed at once; the others are served", () =>
    Effect.gen(function*() {
      const server = yield* testServer({ maxConnections: 2 })
      const open = yield* Effect.acquireRelease(
        Effect.forEach([1, 2], () =>
          Effect.async<Net.Socket>((resume) => {
            const socket = Net.createConnection({ host: "127.0.0.1", port: server.port }, () => resume(Effect.succeed(socket)))
          })),
        (sockets) => Effect.sync(() => sockets.forEach((s) => s.destroy()))
      )
      // Node accepts in order: the third is counted after the two.
      const third = yield* rawUntilClosed(server.port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
      assert.strictEqual(third.received, "")
      // One of the two asks and is answered.
      const answer = yield* Effect.async<string>((resume) => {
        let text = ""
        open[0]!.setEncoding("utf8").on("data", (chunk: string) => {
          text += chunk
          if (text.includes("\r\n\r\n")) resume(Effect.succeed(text))
        })
        open[0]!.write("GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
      })
      assert.match(answer, /^HTTP\/1\.1 200 OK/)
    }).pipe(Effect.scoped))
})

// --- every route over a runtime, on a Unix socket, behind a key ------------------------------

/** One request over the Unix socket. */
const overSocket = (socketPath: string, path: string, headers: Record<string, string> = {}) =>
  Effect.async<{ readonly status: number; readonly body: string; readonly headers: Http.IncomingHttpHeaders }>((resume) => {
    const request = Http.request({ socketPath, path, headers }, (response) => {
      let body = ""
      response.setEncoding("utf8").on("data", (chunk: string) => (body += chunk))
      response.on("end", () => resume(Effect.succeed({ status: response.statusCode!, body, headers: response.headers })))
    })
    request.on("error", (cause) => resume(Effect.die(cause)))
    request.end()
    return Effect.sync(() => request.destroy())
  })

describe("HTTP server over a runtime on a Unix socket", () => {
  // The socket in a directory of its own (created 0700 by the server), removed afterwards.
  const onSocket = Layer.unwrapScoped(
    Effect.map(
      Effect.acquireRelease(
        Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "ng-http-"))),
        (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
      ),
      (dir) => HttpTest.layer({ http: { listen: { _tag: "Unix", path: Path.join(dir, "run", "http.sock") }, apiKey: Redacted.make("sk-unix") } })
    )
  )
  layer(
    onSocket,
    { timeout: 120_000 }
  )((it) => {
    it.effect("GET /health answers over the socket without a key; the APIs need it; the socket is private", () =>
      Effect.gen(function*() {
        const { address } = yield* HttpTest
        assert.strictEqual(address._tag, "UnixAddress")
        const socketPath = address._tag === "UnixAddress" ? address.path : ""
        assert.match(socketPath, /\/run\/http\.sock$/)
        const health = yield* overSocket(socketPath, "/health")
        assert.strictEqual(health.status, 200)
        assert.deepStrictEqual(JSON.parse(health.body), { status: "ok" })
        const refused = yield* overSocket(socketPath, "/v1/models")
        assert.strictEqual(refused.status, 401)
        assert.strictEqual(refused.headers["www-authenticate"], "Bearer")
        assert.strictEqual((JSON.parse(refused.body) as { error: { code: string } }).error.code, "invalid_api_key")
        const ollama = yield* overSocket(socketPath, "/api/tags", { "x-api-key": "wrong" })
        assert.deepStrictEqual(JSON.parse(ollama.body), { error: "the API key is not valid" })
        assert.notStrictEqual((yield* overSocket(socketPath, "/v1/models", { authorization: "Bearer sk-unix" })).status, 401)
        assert.strictEqual(Fs.statSync(socketPath).mode & 0o777, 0o600)
        assert.strictEqual(Fs.statSync(Path.dirname(socketPath)).mode & 0o777, 0o700)
      }))
  })
})
