/**
 * A turn resumed after its runner's death, with real processes: two `nativegen serve --cluster`
 * runners (Unix sockets, one SQLite runner storage, qwen-chat with one thread). A long seeded turn
 * of a conversation r2 holds streams to its client through r1; after 100 tokens, r2 is
 * SIGKILLed with its engine child. The turn is resumed: r1 takes r2's shards, runs the turn again
 * from its start, checks its first chunks against what the client already has and sends on only
 * the rest. The client's stream ends whole and unbroken, with exactly the tokens of the same turn
 * run undisturbed, and no error. The same for a seeded one-off generation that r1, busy, sent to r2
 * by load: resumed on r1, through the work entity of r2's shard that r1 takes over.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Stream from "effect/Stream"
import type { GenerateChunk, GenerateRequest } from "../../src/domain/Inference.js"
import { idsOwnedBy, KillCluster, layer as clusterLayer, type Member, settled, viewLayer } from "./kill-support.js"
import { collectFrom, doneOf, tokensOf } from "../support/generation.js"

const cluster = Layer.provideMerge(viewLayer, clusterLayer({ names: ["r1", "r2"], shards: 6, detection: 3 }))

/** Sampled hot over the whole vocabulary with a seed: long (the end of turn is as unlikely as any token), and the same each run. */
const seeded = { maxTokens: 600, sampling: { temperature: 50, topK: 0, topP: 1, seed: 7 }, thinking: false } as const

/** `request` run undisturbed through `entry`: its tokens (it runs to its limit). */
const undisturbedRun = (entry: Member, request: GenerateRequest) =>
  Effect.map(collectFrom(entry.provider(), request), (chunks) => {
    assert.strictEqual(doneOf(chunks).usage.generatedTokens, seeded.maxTokens)
    return tokensOf(chunks)
  })

/**
 * `request` streamed through `entry`, `victim` SIGKILLed (with its engine) once 100 tokens have
 * arrived: every chunk the client received, and how many tokens it had at the kill.
 */
const killedMidStream = (entry: Member, victim: Member, request: GenerateRequest) =>
  Effect.gen(function*() {
    const midStream = yield* Effect.makeLatch(false)
    const received: Array<GenerateChunk> = []
    let tokens = 0
    const stream = yield* entry.provider().generate(request).pipe(
      Stream.runForEach((chunk) =>
        Effect.suspend(() => {
          received.push(chunk)
          if (chunk._tag === "Text") tokens += chunk.tokens.length
          return tokens >= 100 ? midStream.open : Effect.void
        })
      ),
      Effect.fork
    )
    yield* midStream.await
    yield* victim.kill
    const atKill = tokens
    yield* Effect.logInfo(`resume: ${victim.name} killed, ${atKill} tokens delivered`)
    yield* Fiber.join(stream)
    return { received, atKill }
  })

describe("a turn whose runner is SIGKILLed mid-stream", () => {
  layer(cluster, { timeout: 300_000, excludeTestServices: true })("two runners on Unix sockets", (it) => {
    it.scoped("a seeded turn is resumed on the next owner: the client's stream ends whole, the undisturbed run's tokens, none twice", () =>
      Effect.gen(function*() {
        const { members } = yield* KillCluster
        const [r1, r2] = members
        const snapshot = yield* settled(members)
        const [reference] = yield* idsOwnedBy(snapshot, r1!, 1, "reference")
        const [victim] = yield* idsOwnedBy(snapshot, r2!, 1, "resumed")
        const messages = [{ role: "user" as const, content: "tell me a long story" }]
        // The same turn undisturbed, on r1 (a conversation of its own).
        const undisturbed = yield* undisturbedRun(r1!, { messages, conversation: reference!, ...seeded })
        const { atKill, received } = yield* killedMidStream(r1!, r2!, { messages, conversation: victim!, ...seeded })

        assert.isAbove(atKill, 0)
        assert.isBelow(atKill, undisturbed.length, "the kill came mid-stream")
        assert.deepStrictEqual(tokensOf(received), undisturbed, "the whole turn, once, unchanged")
        assert.strictEqual(doneOf(received).usage.generatedTokens, seeded.maxTokens)
        assert.include(r1!.server()!.log(), "resumed", "r1 resumed the turn")
      }), 240_000)
  })
})

describe("a one-off generation whose runner is SIGKILLed mid-stream", () => {
  layer(cluster, { timeout: 300_000, excludeTestServices: true })("two runners on Unix sockets", (it) => {
    it.scoped("a seeded one-off sent by load to r2 is resumed on r1: the client's stream ends whole, the undisturbed run's tokens", () =>
      Effect.gen(function*() {
        const { members } = yield* KillCluster
        const [r1, r2] = members
        yield* settled(members)
        const request = { messages: [{ role: "user" as const, content: "tell me a long story" }], ...seeded }
        // Undisturbed, through r1 while both are idle (a tie stays on the entry).
        const undisturbed = yield* undisturbedRun(r1!, request)

        // r1 busy with a long one-off of its own, so the next one through r1 goes to r2 by load.
        const busy = yield* Effect.makeLatch(false)
        const keepBusy = yield* r1!.provider().generate({ ...request, messages: [{ role: "user", content: "keep r1 busy" }], maxTokens: 900 }).pipe(
          Stream.tap(() => busy.open),
          Stream.runDrain,
          Effect.forkScoped
        )
        yield* Effect.raceFirst(busy.await, Effect.zipRight(Fiber.join(keepBusy), Effect.dieMessage("r1's long generation ended before its first chunk")))
        const { atKill, received } = yield* killedMidStream(r1!, r2!, request)

        assert.isBelow(atKill, undisturbed.length, "the kill came mid-stream")
        assert.deepStrictEqual(tokensOf(received), undisturbed, "the whole one-off, once, unchanged")
        const log = r1!.server()!.log()
        assert.match(log, /a one-off generation sent to \S*r2\S*: the runner serving turn \S+ was lost after \d+ tokens .*; resumed/, "r2 served it, r1 resumed it")
      }), 240_000)
  })
})
