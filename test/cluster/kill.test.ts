/**
 * A runner's death, with real processes: three `nativegen serve --cluster` runners (Unix sockets,
 * one SQLite runner storage, qwen-chat with one thread), one of them SIGKILLed with its engine
 * child. Its conversations are served by another runner within the detection time (measured: from
 * the kill to the first token of a turn sent at once through a surviving runner), and a
 * conversation whose runner died continues there, recomputed from its transcript (reuse `cold`,
 * or `prefix` where the new runner's slot shared a prefix), with the tokens a single runtime gives
 * for the same history.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Schedule from "effect/Schedule"
import * as Status from "../../src/cluster/Status.js"
import * as Layer from "effect/Layer"
import * as Stream from "effect/Stream"
import type { ChatMessage, GenerateRequest } from "../../src/domain/Inference.js"
import type { Provider } from "../../src/services/Provider.js"
import { holderOf, idsOwnedBy, KillCluster, layer as clusterLayer, settled, viewLayer } from "./kill-support.js"
import { answerOf, collectFrom, doneOf, tokensOf } from "../support/generation.js"

const DETECTION = 3


const settings = { maxTokens: 6, sampling: { temperature: 0 }, thinking: false } as const

/** Milliseconds from now until `effect`'s stream gives its first chunk, and the chunks. */
const timedTurn = (provider: Provider["Type"], request: GenerateRequest, since: number) =>
  Effect.gen(function*() {
    let first: number | undefined
    const chunks = yield* provider.generate(request).pipe(
      Stream.tap(() => Effect.sync(() => (first ??= performance.now()))),
      Stream.runCollect,
      Effect.map(Chunk.toArray)
    )
    return { chunks, firstChunkMillis: (first ?? performance.now()) - since, doneMillis: performance.now() - since }
  })

const cluster = Layer.provideMerge(viewLayer, clusterLayer({ names: ["r1", "r2", "r3"], shards: 12, detection: DETECTION }))

describe("a runner SIGKILLed", () => {
  layer(cluster, { timeout: 400_000, excludeTestServices: true })("three runners on Unix sockets", (it) => {
    it.effect("its conversations are served by another runner within the detection time; one continues, recomputed from its transcript", () =>
      Effect.gen(function*() {
        const { members } = yield* KillCluster
        const [r1, r2, r3] = members
        const snapshot = yield* settled(members)
        yield* Effect.logInfo("settled")
        const [first, second, third] = yield* idsOwnedBy(snapshot, r3!, 3, "victim")
        const user1: ChatMessage = { role: "user", content: "where is the ship" }
        // A turn of each on r3 (through r1), so r3 holds their KV.
        const one = yield* collectFrom(r1!.provider(), { messages: [user1], conversation: first!, ...settings })
        yield* collectFrom(r1!.provider(), { messages: [user1], conversation: second!, ...settings })
        const other = yield* collectFrom(r1!.provider(), { messages: [user1], conversation: third!, ...settings })

        yield* Effect.logInfo("first turns served")
        // Times are taken from the SIGKILL (the kill returns once the runner is reaped).
        const killedAt = performance.now()
        yield* r3!.kill
        // What the storage shows while the shard moves (for the log).
        const watch = yield* Effect.fork(Effect.repeat(
          Effect.flatMap(Effect.orDie(Status.snapshot), (s) => {
            const held = new Map<string, number>()
            for (const owner of s.shards?.values() ?? []) held.set(owner, (held.get(owner) ?? 0) + 1)
            return Effect.logInfo(`+${(performance.now() - killedAt).toFixed(0)} ms: runners ${JSON.stringify(s.runners)}, locks ${JSON.stringify([...held])}`)
          }),
          Schedule.spaced("2 seconds")
        ))
        // At once, a turn of a conversation r3 held, through a surviving runner: it waits for the shard to move.
        const served = yield* timedTurn(r1!.provider(), { messages: [{ role: "user", content: "the storm" }], conversation: second!, ...settings }, killedAt)
        const holder = yield* holderOf(second!)
        yield* Effect.logInfo(
          `detection ${DETECTION} s: first chunk ${served.firstChunkMillis.toFixed(0)} ms after the kill, done at ` +
            `${served.doneMillis.toFixed(0)} ms; shard now on ${holder}`
        )
        yield* Fiber.interrupt(watch)
        if (served.firstChunkMillis > 2 * DETECTION * 1000) {
          yield* Effect.logInfo(`--- r1:\n${r1!.server()?.log().slice(-6000)}\n--- r2:\n${r2!.server()?.log().slice(-6000)}`)
        }
        assert.include([r1!.stored, r2!.stored], holder)
        assert.isAbove(tokensOf(served.chunks).length, 0)
        assert.isBelow(served.firstChunkMillis, 2 * DETECTION * 1000, "served again within twice the detection time")

        yield* Effect.logInfo("served again")
        // The first conversation's next turn: its KV died with r3; recomputed from its transcript.
        const history: ReadonlyArray<ChatMessage> = [user1, { role: "assistant", content: answerOf(one) }, { role: "user", content: "and the crew" }]
        const continued = yield* collectFrom(r1!.provider(), { messages: history, conversation: first!, checkpoint: doneOf(one).checkpoint!, ...settings })
        // The same history as a new conversation on one runtime (r1's own, no hop).
        const [alone] = yield* idsOwnedBy(snapshot, r1!, 1, "alone")
        const plain = yield* collectFrom(r1!.provider(), { messages: history, conversation: alone!, ...settings })
        assert.include(["cold", "prefix"], doneOf(continued).usage.reuse)
        assert.deepStrictEqual(tokensOf(continued), tokensOf(plain))
        assert.strictEqual(doneOf(continued).usage.promptTokens, doneOf(plain).usage.promptTokens)
        yield* Effect.logInfo("continued")
        // A client that sends only the new turn with its checkpoint: the history is the transcript the cluster recorded.
        const bare = yield* collectFrom(r2!.provider(), { messages: [history[2]!], checkpoint: doneOf(other).checkpoint!, ...settings })
        assert.include(["cold", "prefix"], doneOf(bare).usage.reuse)
        assert.deepStrictEqual(tokensOf(bare), tokensOf(plain))
        yield* Effect.logInfo("continued from the recorded transcript")
        // A checkpoint the cluster never gave out is refused, as on a single server.
        const forged = yield* Effect.flip(collectFrom(r1!.provider(), {
          messages: [history[2]!],
          checkpoint: { ...doneOf(other).checkpoint!, hash: "0".repeat(64) },
          ...settings
        }))
        assert.strictEqual(forged._tag, "InvalidCheckpoint")
      }), 300_000)
  })
})
