/**
 * nativegen's own endpoints under `/nativegen/`, against the store-backed runtime with the seed:
 * the status (readiness with the budget by kind, the lanes and the last generations), its event
 * stream, decisions, and the store's models with verification (a corrupt blob found and named).
 * Without a store the model routes answer 404 `store_unavailable`.
 */
import * as HttpServerTag from "@effect/platform/HttpServer"
import { assert, describe, layer } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Stream from "effect/Stream"
import * as Fs from "node:fs"
import { ensureModel } from "../../fixtures/models.js"
import { Artifact, ggufMediaType, Manifest } from "../../src/domain/Manifest.js"
import type { Readiness } from "../../src/domain/Inference.js"
import { HttpConfig } from "../../src/http/HttpConfig.js"
import * as Http from "../../src/http/Server.js"
import { Provider } from "../../src/services/Provider.js"
import { envelope, makeKey, sha256 } from "../store/helpers.js"
import { HttpSeeded } from "./seeded.js"

interface Status {
  readonly object: string
  readonly version: string
  readonly store: boolean
  readonly readiness: Readiness
}

interface ErrorBody {
  readonly error: { readonly message: string; readonly param: string | null; readonly code: string }
}

interface Decision {
  readonly heads: ReadonlyArray<{ readonly name: string; readonly labels: ReadonlyArray<{ readonly probability: number; readonly rank: number }> }>
}

interface Models {
  readonly active: ReadonlyArray<{
    readonly model: string
    readonly role: string
    readonly revision: number
    readonly manifestDigest: string
    readonly signer: string
    readonly running: ReadonlyArray<string>
    readonly artifacts: ReadonlyArray<{ readonly digest: string; readonly size: number }>
  }>
  readonly blobs: ReadonlyArray<{ readonly digest: string }>
}

interface Verification {
  readonly ok: boolean
  readonly revisions: ReadonlyArray<{ readonly artifacts: ReadonlyArray<{ readonly digest: string; readonly ok: boolean; readonly error?: string }> }>
}

/** A JSON answer as the test expects it to be shaped (the assertions check it). */
const getJson = <A>(url: string, init?: RequestInit) =>
  Effect.promise(async () => {
    const response = await fetch(url, init)
    return { status: response.status, body: (await response.json()) as A }
  })

const postJson = <A>(url: string, body: unknown) =>
  getJson<A>(url, { method: "POST", headers: { "content-type": "application/json" }, body: typeof body === "string" ? body : JSON.stringify(body) })

/** The first `count` events of `/nativegen/events`, then the connection is closed. */
const readEvents = (url: string, count: number) =>
  Effect.promise(async () => {
    const controller = new AbortController()
    const response = await fetch(url, { signal: controller.signal })
    const events: Array<Status & { readonly type: string }> = []
    let buffer = ""
    const decoder = new TextDecoder()
    const reader = response.body!.getReader()
    while (events.length < count) {
      const { done, value } = await reader.read()
      if (done) break
      buffer += decoder.decode(value, { stream: true })
      let end: number
      while ((end = buffer.indexOf("\n\n")) >= 0 && events.length < count) {
        const data = /^data: (.*)$/m.exec(buffer.slice(0, end))?.[1]
        buffer = buffer.slice(end + 2)
        if (data !== undefined) events.push(JSON.parse(data))
      }
    }
    controller.abort()
    return { contentType: response.headers.get("content-type"), events }
  })

const key = makeKey()

describe("HTTP /nativegen/", () => {
  layer(HttpSeeded.layer({ trustedKeys: [key.publicPem] }), { timeout: 180_000, excludeTestServices: true })((it) => {
    it.effect("status: readiness with the budget by kind, every lane, and the store", () =>
      Effect.gen(function*() {
        const { baseUrl } = yield* HttpSeeded
        const { body, status } = yield* getJson<Status>(`${baseUrl}/nativegen/status`)
        assert.strictEqual(status, 200)
        const { readiness } = body
        assert.strictEqual(body.object, "nativegen.status")
        assert.isTrue(body.store)
        assert.strictEqual(readiness.state, "ready")
        assert.deepStrictEqual(readiness.roles.map((r) => [r.role, r.model, r.revision]), [["generation", "qwen-chat", 1], ["decision", "qwen-decision", 1]])
        const budget = readiness.budget!
        assert.isAbove(budget.weightsBytes, 0)
        assert.isAbove(budget.kvBytes, 0)
        assert.strictEqual(budget.weightsBytes + budget.kvBytes + budget.workspaceBytes, budget.chargedBytes)
        assert.deepStrictEqual(readiness.scheduler.lanes, [
          { lane: "decision", running: 0, queued: 0 },
          { lane: "foreground", running: 0, queued: 0 },
          { lane: "utility", running: 0, queued: 0 },
          { lane: "preparation", running: 0, queued: 0 }
        ])
      }))

    it.effect("a generation counts as running in its lane while it streams, and is listed with its timings once done", () =>
      Effect.gen(function*() {
        const { baseUrl, provider } = yield* HttpSeeded
        const laneOf = (status: Status, lane: string) => status.readiness.scheduler.lanes!.find((l) => l.lane === lane)!
        const started = yield* Effect.makeLatch(false)
        const stream = yield* provider.generate({
          messages: [{ role: "user", content: "Count from one to one hundred." }],
          maxTokens: 400,
          lane: "utility",
          thinking: false
        }).pipe(
          Stream.tap(() => started.open),
          Stream.runDrain,
          Effect.fork
        )
        yield* started.await
        const running = (yield* getJson<Status>(`${baseUrl}/nativegen/status`)).body
        assert.deepStrictEqual(laneOf(running, "utility"), { lane: "utility", running: 1, queued: 0 })
        assert.strictEqual(running.readiness.scheduler.running, 1)
        yield* Fiber.interrupt(stream)

        const before = (yield* getJson<Status>(`${baseUrl}/nativegen/status`)).body.readiness.recentGenerations!.length
        yield* provider.generate({ messages: [{ role: "user", content: "Say hello." }], maxTokens: 8, thinking: false }).pipe(Stream.runDrain)
        const after = (yield* getJson<Status>(`${baseUrl}/nativegen/status`)).body
        assert.deepStrictEqual(laneOf(after, "utility"), { lane: "utility", running: 0, queued: 0 })
        // The interrupted one never finished: only the second is listed.
        const recent = after.readiness.recentGenerations!
        assert.strictEqual(recent.length, before + 1)
        const last = recent[recent.length - 1]!
        assert.strictEqual(last.lane, "foreground")
        assert.strictEqual(last.generatedTokens, 8)
        assert.strictEqual(last.stopReason, "maxTokens")
        assert.isAbove(last.firstTokenMillis, 0)
        assert.isAbove(last.decodeTokensPerSecond, 0)
      }))

    it.effect("events: the readiness first, then a sample every interval", () =>
      Effect.gen(function*() {
        const { baseUrl } = yield* HttpSeeded
        const { contentType, events } = yield* readEvents(`${baseUrl}/nativegen/events?interval=250`, 3)
        assert.strictEqual(contentType, "text/event-stream")
        assert.deepStrictEqual(events.map((e) => e.type).sort(), ["readiness", "sample", "sample"])
        for (const event of events) assert.strictEqual(event.readiness.state, "ready")
        const refused = yield* getJson<ErrorBody>(`${baseUrl}/nativegen/events?interval=5`)
        assert.strictEqual(refused.status, 400)
        assert.strictEqual(refused.body.error.param, "interval")
      }))

    it.effect("decide: each head's labels with probabilities that sum to one; a bad body names its field", () =>
      Effect.gen(function*() {
        const { baseUrl } = yield* HttpSeeded
        const { body, status } = yield* postJson<Decision>(`${baseUrl}/nativegen/decide`, {
          prompt: "I loved every minute of this film.",
          heads: [{ name: "sentiment", labels: ["positive", "negative"] }, { name: "topic", labels: ["film", "food", "travel"] }]
        })
        assert.strictEqual(status, 200)
        assert.deepStrictEqual(body.heads.map((h) => h.name), ["sentiment", "topic"])
        for (const head of body.heads) {
          assert.closeTo(head.labels.reduce((sum, l) => sum + l.probability, 0), 1, 1e-6)
          assert.deepStrictEqual(head.labels.map((l) => l.rank).sort(), head.labels.map((_, i) => i + 1))
        }
        const missing = yield* postJson<ErrorBody>(`${baseUrl}/nativegen/decide`, { prompt: "x", heads: [{ name: "h" }] })
        assert.strictEqual(missing.status, 400)
        assert.strictEqual(missing.body.error.param, "heads[0].labels")
        const notJson = yield* postJson<ErrorBody>(`${baseUrl}/nativegen/decide`, "{not json")
        assert.strictEqual(notJson.status, 400)
        assert.strictEqual(notJson.body.error.code, "invalid_json")
      }))

    it.effect("models: the active models with revision, signer and artifacts; which role runs each", () =>
      Effect.gen(function*() {
        const { baseUrl, provider } = yield* HttpSeeded
        const { body, status } = yield* getJson<Models>(`${baseUrl}/nativegen/models`)
        assert.strictEqual(status, 200)
        const readiness = yield* provider.readiness
        const chat = body.active.find((m) => m.model === "qwen-chat")!
        assert.strictEqual(chat.role, "generation")
        assert.strictEqual(chat.revision, 1)
        assert.deepStrictEqual(chat.running, ["generation"])
        assert.strictEqual(chat.manifestDigest, readiness.roles[0]!.manifestDigest)
        assert.match(chat.signer, /^ed25519:/)
        assert.strictEqual(chat.artifacts[0]!.size, Fs.statSync(ensureModel("qwen-chat")).size)
        assert.notProperty(chat.artifacts[0], "path")
        assert.includeMembers(body.blobs.map((b) => b.digest), [chat.artifacts[0]!.digest])
      }))

    it.effect("verify: the seed verifies; a corrupted blob is named; an unknown model is 404", () =>
      Effect.gen(function*() {
        const { baseUrl, root, store } = yield* HttpSeeded
        const ok = yield* postJson<Verification>(`${baseUrl}/nativegen/models/qwen-chat/verify`, {})
        assert.strictEqual(ok.status, 200)
        assert.isTrue(ok.body.ok)
        assert.isTrue(ok.body.revisions[0]!.artifacts[0]!.ok)

        // A model the runtime does not run, signed by a trusted key; then one byte of its blob changed.
        const bytes = Fs.readFileSync(ensureModel("tiny"))
        const digest = sha256(bytes)
        const path = yield* store.stage(ensureModel("tiny"), digest, bytes.length)
        yield* store.activate(envelope(key, new Manifest({
          name: "spare",
          role: "generation",
          revision: 1,
          artifacts: [new Artifact({ digest, size: bytes.length, mediaType: ggufMediaType })]
        })))
        const fd = Fs.openSync(path, "r+")
        Fs.writeSync(fd, Buffer.from([bytes[bytes.length - 1]! ^ 0xff]), 0, 1, bytes.length - 1)
        Fs.closeSync(fd)
        const bad = yield* postJson<Verification>(`${baseUrl}/nativegen/models/spare/verify`, {})
        assert.strictEqual(bad.status, 200)
        assert.isFalse(bad.body.ok)
        assert.deepInclude(bad.body.revisions[0]!.artifacts[0], { digest, ok: false, error: "ArtifactCorrupt" })
        assert.isTrue(Fs.readdirSync(`${root}/quarantine`).length > 0)

        const unknown = yield* postJson<ErrorBody>(`${baseUrl}/nativegen/models/nothing-here/verify`, {})
        assert.strictEqual(unknown.status, 404)
        assert.strictEqual(unknown.body.error.code, "model_not_found")
        assert.match(unknown.body.error.message, /qwen-chat/)
      }))

    it.scoped("without a store the model routes answer 404 store_unavailable; the rest works", () =>
      Effect.gen(function*() {
        const { provider } = yield* HttpSeeded
        // The same Provider behind a second server whose context has no Store.
        const context = yield* Layer.build(
          Http.layer({ ...HttpConfig.defaults, listen: { _tag: "Tcp", host: "127.0.0.1", port: 0 } }).pipe(
            Layer.provide(Layer.succeed(Provider, provider))
          )
        )
        const address = Context.get(context, HttpServerTag.HttpServer).address
        assert(address._tag === "TcpAddress")
        const baseUrl = `http://127.0.0.1:${address.port}`
        const listing = yield* getJson<ErrorBody>(`${baseUrl}/nativegen/models`)
        assert.strictEqual(listing.status, 404)
        assert.strictEqual(listing.body.error.code, "store_unavailable")
        const verify = yield* postJson<ErrorBody>(`${baseUrl}/nativegen/models/qwen-chat/verify`, {})
        assert.strictEqual(verify.body.error.code, "store_unavailable")
        const status = yield* getJson<Status>(`${baseUrl}/nativegen/status`)
        assert.isFalse(status.body.store)
      }))
  })
})
