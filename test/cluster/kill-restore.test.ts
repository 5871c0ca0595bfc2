/**
 * A runner's death where the runners share one directory of conversation state files
 * (`--cluster-conversations`): two `nativegen serve --cluster` runners (Unix sockets, one SQLite
 * runner storage, qwen-chat with one thread and two conversation slots), r2 SIGKILLed with its
 * engine child. A conversation whose KV r2 had saved before it died (its slot taken over by a
 * later conversation) continues on r1 from its state file (reuse `restored`, no recompute); one
 * whose KV lived only in r2's slot is recomputed from its transcript (`cold` or `prefix`), and so
 * is one that went on in a slot after its file was saved (the file holds an older checkpoint).
 * All give the tokens of the same turns on one runtime.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type { ChatMessage, GenerateChunk, GenerateRequest } from "../../src/domain/Inference.js"
import { holderOf, idsOwnedBy, KillCluster, layer as clusterLayer, settled, viewLayer } from "./kill-support.js"
import { answerOf, collectFrom, doneOf, tokensOf } from "../support/generation.js"

const settings = { maxTokens: 6, sampling: { temperature: 0 }, thinking: false } as const

const cluster = Layer.provideMerge(
  viewLayer,
  clusterLayer({ names: ["r1", "r2"], shards: 6, detection: 3, sharedConversations: true, env: { NATIVEGEN_SLOTS: "2" } })
)

const user1: ChatMessage = { role: "user", content: "where is the ship" }
const questions = ["and the crew", "and the harbor"]

/**
 * The next turn of `conversation` after `turns` (its replies so far, each turn's chunks): the
 * history with its answers, the next question, and the last turn's checkpoint.
 */
const next = (conversation: string, turns: ReadonlyArray<ReadonlyArray<GenerateChunk>>): GenerateRequest => ({
  messages: [
    user1,
    ...turns.flatMap((turn, i): Array<ChatMessage> => [{ role: "assistant", content: answerOf(turn) }, { role: "user", content: questions[i]! }])
  ],
  conversation,
  checkpoint: doneOf(turns.at(-1)!).checkpoint!,
  ...settings
})

describe("a runner SIGKILLed, its conversations' state files shared", () => {
  layer(cluster, { timeout: 300_000, excludeTestServices: true })("two runners on Unix sockets", (it) => {
    it.effect("a conversation saved before the kill is restored from its state file; one whose file is older than its slot, or that has none, is recomputed", () =>
      Effect.gen(function*() {
        const { members } = yield* KillCluster
        const [r1, r2] = members
        const provider = r1!.provider()
        const turn = (request: GenerateRequest) => collectFrom(provider, request)
        const snapshot = yield* settled(members)
        const [stale, saved, live] = yield* idsOwnedBy(snapshot, r2!, 3, "victim")
        // Three conversations on r2's two slots (sent through r1). Each slot taken over saves the
        // KV it held, the least recently used: `live` takes the slot of `stale` (saved at its
        // first turn); `stale`'s second turn restores it from that file and takes the slot of
        // `saved` (saved at its first turn), so `stale` goes on in a slot, beyond its file.
        const firstStale = yield* turn({ messages: [user1], conversation: stale!, ...settings })
        const firstSaved = yield* turn({ messages: [user1], conversation: saved!, ...settings })
        const firstLive = yield* turn({ messages: [user1], conversation: live!, ...settings })
        const secondStale = yield* turn(next(stale!, [firstStale]))
        assert.strictEqual(doneOf(secondStale).usage.reuse, "restored", "r2 saved `stale` when `live` took its slot")
        // The same turns on one runtime, for the tokens: a conversation r1 holds, its turns from its slot.
        const [alone] = yield* idsOwnedBy(snapshot, r1!, 1, "alone")
        const firstAlone = yield* turn({ messages: [user1], conversation: alone!, ...settings })
        const secondAlone = yield* turn(next(alone!, [firstAlone]))
        const thirdAlone = yield* turn(next(alone!, [firstAlone, secondAlone]))
        assert.strictEqual(doneOf(thirdAlone).usage.reuse, "continuation")
        assert.deepStrictEqual(tokensOf(firstSaved), tokensOf(firstAlone))
        assert.deepStrictEqual(tokensOf(secondStale), tokensOf(secondAlone))

        yield* r2!.kill
        // The next turns wait for r2's shards to move to r1 (the entry sends a turn lost before any token again).
        const restored = yield* turn(next(saved!, [firstSaved]))
        assert.strictEqual(yield* holderOf(saved!), r1!.stored)
        assert.strictEqual(doneOf(restored).usage.reuse, "restored", "continued from the state file r2 saved")
        assert.deepStrictEqual(tokensOf(restored), tokensOf(secondAlone))
        const fromSlot = yield* turn(next(live!, [firstLive]))
        assert.include(["cold", "prefix"], doneOf(fromSlot).usage.reuse, "its KV died with r2: recomputed from the transcript")
        assert.deepStrictEqual(tokensOf(fromSlot), tokensOf(secondAlone))
        const beyondFile = yield* turn(next(stale!, [firstStale, secondStale]))
        assert.include(["cold", "prefix"], doneOf(beyondFile).usage.reuse, "its file holds an older checkpoint: recomputed")
        assert.deepStrictEqual(tokensOf(beyondFile), tokensOf(thirdAlone))
      }), 240_000)
  })
})
