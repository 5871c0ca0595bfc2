/**
 * With the real runtime (engine child on the generated models) behind the socket: a client
 * outlives a server restart (issue 12, item 17), and a client that vanishes with many generations
 * in flight leaves none running (item 18).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as Fs from "node:fs"
import * as Path from "node:path"
import type { ChatMessage, GenerateChunk, GenerateRequest } from "../../src/domain/Inference.js"
import * as Client from "../../src/rpc/Client.js"
import * as Server from "../../src/rpc/Server.js"
import { Provider } from "../../src/services/Provider.js"
import { runtimeLayer } from "../support/engine.js"
import { storeLayer } from "../store/helpers.js"
import { connect as rawConnect, request } from "./support/RawClient.js"
import { tempDir } from "./support/serve.js"

/** The runtime and its server on `socketPath`, conversations saved under `dir`, for `scope`. */
const startServer = (dir: string, socketPath: string, scope: Scope.Scope) =>
  Effect.gen(function*() {
    const runtime = yield* Layer.build(runtimeLayer({ conversationsDirectory: Path.join(dir, "conversations") }))
    yield* Layer.build(Server.layer({ ...Server.defaults, socketPath }).pipe(
      Layer.provide(Layer.succeedContext(runtime)),
      Layer.provide(storeLayer(Path.join(dir, "store"), []))
    ))
    return Context.get(runtime, Provider)
  }).pipe(Scope.extend(scope), Effect.orDie)

const done = (chunks: ReadonlyArray<GenerateChunk>) => {
  const last = chunks.at(-1)
  if (last?._tag !== "Done") throw new Error(`the last chunk is not Done: ${JSON.stringify(last)}`)
  return last
}

const answerOf = (chunks: ReadonlyArray<GenerateChunk>) =>
  chunks.map((c) => (c._tag === "Text" && c.channel === "answer" ? c.text : "")).join("")

const greedy = (messages: ReadonlyArray<ChatMessage>, maxTokens: number, extra: Partial<GenerateRequest> = {}): GenerateRequest => ({
  messages,
  maxTokens,
  sampling: { temperature: 0 },
  ...extra
})

describe("the real runtime behind the socket", () => {
  it.live("a client outlives a server restart: its waiting call goes through on the new server, and the conversation continues restored", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      Fs.mkdirSync(Path.join(dir, "run"), { mode: 0o700 })
      const socketPath = Path.join(dir, "run", "nativegen.sock")
      const first = yield* Scope.make()
      yield* startServer(dir, socketPath, first)
      const client = yield* Layer.build(Client.layer({ socketPath }))
      const remote = Context.get(client, Provider)
      const user: ChatMessage = { role: "user", content: "Tell me about the harbor." }
      const one = Chunk.toArray(yield* Stream.runCollect(remote.generate(greedy([user], 6, { conversation: "restart" }))))
      const checkpoint = done(one).checkpoint!
      // A graceful stop: conversations are saved, the engine child stopped, the socket removed.
      yield* Scope.close(first, Exit.void)
      assert.isFalse(Fs.existsSync(socketPath))
      const turn = yield* Effect.fork(Stream.runCollect(remote.generate(greedy(
        [user, { role: "assistant", content: answerOf(one) }, { role: "user", content: "And the lighthouse?" }],
        6,
        { conversation: "restart", checkpoint }
      ))))
      assert.isTrue(Option.isNone(yield* Fiber.join(turn).pipe(Effect.timeoutOption("500 millis"))), "the call waits")
      const second = yield* Scope.make()
      yield* startServer(dir, socketPath, second)
      const two = done(Chunk.toArray(yield* Fiber.join(turn)))
      assert.strictEqual(two.usage.reuse, "restored")
      assert.strictEqual(two.usage.reusedTokens, checkpoint.tokens - 1)
      yield* Scope.close(second, Exit.void)
    }).pipe(Effect.scoped), { timeout: 180_000 })

  it.live("a client that vanishes with many generations in flight leaves none running", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      Fs.mkdirSync(Path.join(dir, "run"), { mode: 0o700 })
      const socketPath = Path.join(dir, "run", "nativegen.sock")
      const embedded = yield* startServer(dir, socketPath, yield* Effect.scope)
      const raw = yield* rawConnect(socketPath)
      // More than the engine's sequences: some run, the rest wait in the scheduler's queue.
      for (let i = 0; i < 8; i++) {
        yield* raw.send(request(String(i), "Generate", greedy([{ role: "user", content: `Write a long essay, part ${i}.` }], 2000, {
          conversation: `vanish-${i}`
        })))
      }
      const first = yield* raw.next
      assert.strictEqual(first._tag, "Chunk")
      const busy = yield* embedded.readiness
      assert.isAbove(busy.scheduler.running + busy.scheduler.queued, 1)
      yield* raw.destroy
      yield* embedded.readiness.pipe(
        Effect.repeat({ schedule: Schedule.spaced("20 millis"), until: (r) => r.scheduler.running === 0 && r.scheduler.queued === 0 }),
        Effect.timeout("30 seconds")
      )
      const idle = yield* embedded.readiness
      assert.strictEqual(idle.scheduler.running, 0)
      assert.strictEqual(idle.scheduler.queued, 0)
      // The engine serves the next request.
      const next = Chunk.toArray(yield* Stream.runCollect(embedded.generate(greedy([{ role: "user", content: "hi" }], 3))))
      assert.strictEqual(done(next).usage.generatedTokens, 3)
    }).pipe(Effect.scoped), { timeout: 180_000 })
})
