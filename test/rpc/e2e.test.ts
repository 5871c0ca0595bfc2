/**
 * End to end over a real socket with the real runtime (store with the packaged seed, engine
 * child, admission, scheduler, provider): the remote Provider gives what the embedded one gives
 * (greedy generation streamed chunk by chunk, decisions, counts, status), a store import reports
 * its progress, and a client that goes away cancels its generation in the engine.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Queue from "effect/Queue"
import * as Schedule from "effect/Schedule"
import * as Stream from "effect/Stream"
import * as Fs from "node:fs"
import * as Path from "node:path"
import type { GenerateChunk, GenerateRequest } from "../../src/domain/Inference.js"
import * as Runtime from "../../src/layers/Runtime.js"
import * as Client from "../../src/rpc/Client.js"
import * as Server from "../../src/rpc/Server.js"
import { Provider } from "../../src/services/Provider.js"
import { Store } from "../../src/services/Store.js"
import { testChild, testRunEnv } from "../support/engine.js"
import { bytesOf, envelope, makeKey, manifestOf, sha256 } from "../store/helpers.js"
import { connect as rawConnect, request } from "./support/RawClient.js"
import { tempDir } from "./support/serve.js"

const key = makeKey()

class E2E extends Context.Tag("test/rpc/E2E")<E2E, {
  readonly dir: string
  readonly socketPath: string
  readonly embedded: Provider["Type"]
  readonly remote: Provider["Type"]
  readonly store: Client.RemoteStore["Type"]
  /** One entry per generation the server's Provider starts: completes with how its stream ended. */
  readonly generations: Queue.Queue<Deferred.Deferred<Exit.Exit<unknown, unknown>>>
}>() {}

const e2e = Layer.scoped(E2E, Effect.gen(function*() {
  const dir = yield* tempDir
  const runtime = yield* Layer.build(Runtime.layer({
    store: { root: Path.join(dir, "store"), trustedKeys: [key.publicPem], reapGrace: Duration.zero },
    admission: { contextCap: { generation: 4096, decision: 1024 }, workspaceReservationBytes: 64 * 1024 * 1024 },
    worker: { child: testChild, childEnv: testRunEnv, prefillChunk: 128, stopTimeout: Duration.seconds(3) }
  }))
  const embedded = Context.get(runtime, Provider)
  const generations = yield* Queue.unbounded<Deferred.Deferred<Exit.Exit<unknown, unknown>>>()
  // The server's Provider is the runtime's, with each generation's end recorded.
  const observed = Provider.of({
    ...embedded,
    generate: (request) =>
      Stream.unwrapScoped(Effect.gen(function*() {
        const ended = yield* Deferred.make<Exit.Exit<unknown, unknown>>()
        yield* Effect.addFinalizer((exit) => Deferred.succeed(ended, exit))
        yield* Queue.offer(generations, ended)
        return embedded.generate(request)
      }))
  })
  const socketPath = Path.join(dir, "run", "nativegen.sock")
  yield* Layer.build(Server.layer({ ...Server.defaults, socketPath }).pipe(
    Layer.provide(Layer.succeed(Provider, observed)),
    Layer.provide(Layer.succeed(Store, Context.get(runtime, Store)))
  ))
  const client = yield* Layer.build(Client.layer({ socketPath }))
  return {
    dir,
    socketPath,
    embedded,
    remote: Context.get(client, Provider),
    store: Context.get(client, Client.RemoteStore),
    generations
  }
}))

const greedy = (content: string, maxTokens: number): GenerateRequest => ({
  messages: [{ role: "user", content }],
  maxTokens,
  sampling: { temperature: 0 }
})

/**
 * A generation that runs on until cancelled: greedy, the seed model's script ends after 26 tokens,
 * but at this temperature its 24-nat margin is nothing and it samples near-uniformly over 151,936
 * tokens, of which only a handful end the generation.
 */
const long = (content: string, maxTokens: number): GenerateRequest => ({
  messages: [{ role: "user", content }],
  maxTokens,
  sampling: { temperature: 100, seed: 1 }
})

const texts = (chunks: ReadonlyArray<GenerateChunk>) =>
  chunks.flatMap((c) => c._tag === "Text" ? [[c.channel, c.text, c.tokens] as const] : [])

/** Waits until the engine runs nothing (the scheduler's count, polled). */
const idle = (provider: Provider["Type"]) =>
  provider.readiness.pipe(
    Effect.repeat({ schedule: Schedule.spaced("20 millis"), until: (r) => r.scheduler.running === 0 && r.scheduler.queued === 0 }),
    Effect.timeoutFail({ duration: "20 seconds", onTimeout: () => new Error("the engine kept running the cancelled generation") })
  )

describe("RPC end to end", () => {
  layer(e2e, { timeout: 240_000, excludeTestServices: true })("real runtime over a socket", (it) => {
    it.effect("status: the remote readiness is the runtime's", () =>
      Effect.gen(function*() {
        const { embedded, remote } = yield* E2E
        const [local, viaSocket] = [yield* embedded.readiness, yield* remote.readiness]
        assert.strictEqual(viaSocket.state, "ready")
        assert.deepStrictEqual(viaSocket.roles, local.roles)
        assert.deepStrictEqual(viaSocket.engine.pid, local.engine.pid)
      }))

    it.effect("generate streams the same greedy output as the embedded Provider, chunk by chunk", () =>
      Effect.gen(function*() {
        const { embedded, generations, remote } = yield* E2E
        const request = greedy("Tell me a story about a lighthouse.", 24)
        const local = Chunk.toArray(yield* Stream.runCollect(embedded.generate(request)))
        const viaSocket = Chunk.toArray(yield* Stream.runCollect(remote.generate(request)))
        assert.isTrue(Exit.isSuccess(yield* Deferred.await(yield* Queue.take(generations))))
        assert.deepStrictEqual(texts(viaSocket), texts(local))
        const [doneLocal, doneRemote] = [local.at(-1), viaSocket.at(-1)]
        assert.strictEqual(doneRemote?._tag, "Done")
        if (doneRemote?._tag === "Done" && doneLocal?._tag === "Done") {
          assert.strictEqual(doneRemote.stopReason, doneLocal.stopReason)
          assert.strictEqual(doneRemote.usage.generatedTokens, doneLocal.usage.generatedTokens)
          assert.strictEqual(doneRemote.usage.promptTokens, doneLocal.usage.promptTokens)
        }
        // Streamed: more than one message, not one batch at the end.
        assert.isAbove(viaSocket.length, 1)
      }))

    it.effect("decide and count give what the embedded Provider gives", () =>
      Effect.gen(function*() {
        const { embedded, remote } = yield* E2E
        const request = { prompt: "Is the sea blue?", heads: [{ name: "answer", labels: ["yes", "no"] }] }
        const [local, viaSocket] = [yield* embedded.decide(request), yield* remote.decide(request)]
        assert.deepStrictEqual(viaSocket.heads, local.heads)
        const count = { messages: [{ role: "user" as const, content: "count me" }] }
        assert.deepStrictEqual(yield* remote.count(count), yield* embedded.count(count))
      }))

    it.effect("a typed Provider error crosses intact", () =>
      Effect.gen(function*() {
        const { remote } = yield* E2E
        const error = yield* Effect.flip(Stream.runDrain(remote.generate(greedy("x", 1_000_000))))
        const local = yield* Effect.flip(Stream.runDrain((yield* E2E).embedded.generate(greedy("x", 1_000_000))))
        assert.strictEqual(error._tag, local._tag)
        assert.strictEqual(error.message, local.message)
        yield* Queue.takeAll((yield* E2E).generations)
      }))

    it.effect("a client that disconnects mid-stream cancels its generation: the engine stops working on it", () =>
      Effect.gen(function*() {
        const { embedded, generations, socketPath } = yield* E2E
        yield* Effect.scoped(Effect.gen(function*() {
          const raw = yield* rawConnect(socketPath)
          yield* raw.send(request("1", "Generate", long("Write a very long essay about the ocean.", 3000)))
          const ended = yield* Queue.take(generations)
          const first = yield* raw.next
          assert.strictEqual(first._tag, "Chunk")
          yield* raw.destroy
          assert.isTrue(Exit.isInterrupted(yield* Deferred.await(ended)))
        }))
        yield* idle(embedded)
      }))

    it.effect("interrupting the typed client's stream cancels the generation in the engine", () =>
      Effect.gen(function*() {
        const { embedded, generations, remote } = yield* E2E
        const received = yield* Deferred.make<void>()
        const fiber = yield* remote.generate(long("Write a very long essay about mountains.", 3000)).pipe(
          Stream.runForEach(() => Deferred.succeed(received, undefined)),
          Effect.fork
        )
        const ended = yield* Queue.take(generations)
        yield* Deferred.await(received)
        yield* Fiber.interrupt(fiber)
        assert.isTrue(Exit.isInterrupted(yield* Deferred.await(ended)))
        yield* idle(embedded)
        // The engine serves the next request.
        const next = Chunk.toArray(yield* Stream.runCollect(embedded.generate(greedy("hi", 4))))
        assert.strictEqual(next.at(-1)?._tag, "Done")
      }))

    it.effect("store import with progress through the socket, next to the seed", () =>
      Effect.gen(function*() {
        const { dir, store } = yield* E2E
        const bytes = bytesOf("imported", 24 * 1024 * 1024)
        const path = Path.join(dir, "imported.gguf")
        Fs.writeFileSync(path, bytes)
        const digest = sha256(bytes)
        const manifest = envelope(key, manifestOf("imported", 1, [{ digest, size: bytes.length }], { role: "decision" }))
        const events = Chunk.toArray(yield* Stream.runCollect(store.import({ manifest, path })))
        assert.deepStrictEqual(events[0], { _tag: "Verified", model: "imported", role: "decision", revision: 1 })
        const progress = events.flatMap((e) => e._tag === "Progress" ? [e.bytes] : [])
        assert.isAbove(progress.length, 0)
        assert.deepStrictEqual(progress, [...progress].sort((a, b) => a - b))
        assert.strictEqual(progress.at(-1), bytes.length)
        assert.deepStrictEqual(events.slice(-2).map((e) => e._tag), ["Staged", "Activated"])
        const listing = yield* store.list
        assert.includeMembers(listing.active.map((a) => a.model), ["qwen-chat", "qwen-decision", "imported"])
      }))
  })
})
