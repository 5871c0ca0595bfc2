/**
 * The entry runner's death mid-turn, with real processes: two `nativegen serve --cluster` runners
 * (Unix sockets, one SQLite runner storage, qwen-chat with one thread). A long turn of a
 * conversation r2 holds streams to its client through r1; r1 is SIGKILLed with its engine child.
 * The client gets a typed failure naming the tokens it had (never a silent end), and r2 stops the
 * turn (its pushes to r1's sink fail, its direct call's connection closes) instead of generating
 * for nobody until its token limit: its scheduler runs nothing, and the turn never finished
 * (no Done: it is not among r2's recent generations). r2 then serves the conversation again.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Schedule from "effect/Schedule"
import * as Stream from "effect/Stream"
import * as Client from "../../src/rpc/Client.js"
import { Provider } from "../../src/services/Provider.js"
import { idsOwnedBy, KillCluster, layer as clusterLayer, settled, viewLayer } from "./kill-support.js"
import { collectFrom, doneOf, failureOf } from "../support/generation.js"

const cluster = Layer.provideMerge(viewLayer, clusterLayer({ names: ["r1", "r2"], shards: 6, detection: 3 }))

/** Sampled hot over the whole vocabulary: the end of turn is as unlikely as any token, so it runs to its limit. */
const long = { maxTokens: 900, sampling: { temperature: 50, topK: 0, topP: 1, seed: 1 }, thinking: false } as const

describe("the entry runner SIGKILLed mid-turn", () => {
  layer(cluster, { timeout: 300_000, excludeTestServices: true })("two runners on Unix sockets", (it) => {
    it.scoped("the client gets a typed failure; the owner stops the turn rather than generating for nobody", () =>
      Effect.gen(function*() {
        const { members } = yield* KillCluster
        const [r1, r2] = members
        const [conversation] = yield* idsOwnedBy(yield* settled(members), r2!, 1, "orphaned")
        const owner = r2!.provider()
        const finishedBefore = (yield* owner.readiness).recentGenerations?.length ?? 0

        const firstChunk = yield* Effect.makeLatch(false)
        let delivered = 0
        // A client of r1's public socket of the test's own (r1's own client closes with r1's incarnation), as an application's would be.
        const client = Context.get(yield* Layer.build(Client.layer({ socketPath: r1!.server()!.socket })), Provider)
        const turn = yield* client.generate({ messages: [{ role: "user", content: "tell me a long story" }], conversation, ...long }).pipe(
          Stream.runForEach((chunk) =>
            Effect.zipRight(Effect.sync(() => void (delivered += chunk._tag === "Text" ? chunk.tokens.length : 0)), firstChunk.open)
          ),
          Effect.fork
        )
        yield* firstChunk.await
        yield* Effect.logInfo(`entry-death: streaming, ${delivered} tokens`)
        assert.strictEqual((yield* owner.readiness).scheduler.running, 1, "r2 runs the turn")
        yield* r1!.kill
        yield* Effect.logInfo(`entry-death: r1 killed, ${delivered} tokens`)

        const failure = yield* failureOf(Fiber.join(turn))
        assert.strictEqual(failure._tag, "GenerationFailed", JSON.stringify(failure))
        assert.strictEqual(failure._tag === "GenerationFailed" ? failure.deliveredTokens : -1, delivered)
        assert.isAbove(delivered, 0)

        yield* Effect.logInfo(`entry-death: the client failed after ${delivered} tokens`)
        // r2 stops the turn: nothing runs, and it ended without its Done (stopped, not run to its limit).
        yield* Effect.flatMap(owner.readiness, (r) => r.scheduler.running === 0 ? Effect.void : Effect.fail("still running")).pipe(
          Effect.retry(Schedule.spaced("100 millis").pipe(Schedule.upTo("60 seconds"))),
          Effect.orDieWith(() => new Error(`r2 still runs the orphaned turn:\n${r2!.server()?.log().slice(-3000)}`))
        )
        const finished = (yield* owner.readiness).recentGenerations ?? []
        assert.strictEqual(finished.length, finishedBefore, `the turn was stopped: ${JSON.stringify(finished.at(-1))}`)

        // The conversation is served again, through r2 itself.
        const again = yield* collectFrom(owner, { messages: [{ role: "user", content: "hello" }], conversation, maxTokens: 4, thinking: false })
        assert.isAbove(doneOf(again).usage.generatedTokens, 0)
      }), 240_000)
  })
})
