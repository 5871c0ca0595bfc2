/**
 * A runner's death where the runners share one directory of conversation state files
 * (`--cluster-conversations`): two `nativegen serve --cluster` runners (Unix sockets, one SQLite
 * runner storage, qwen-chat with one thread and two conversation slots), r2 SIGKILLed with its
 * engine child. A conversation whose KV r2 had saved before it died (its slot taken over by a
 * later conversation) continues on r1 from its state file (reuse `restored`, no recompute); one
 * whose KV lived only in r2's slot is recomputed from its transcript (`cold` or `prefix`). Both
 * give the tokens of the same turns on one runtime.
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

/** The follow-up of a first turn `first` of `conversation`, with its history and checkpoint. */
const followUp = (first: ReadonlyArray<GenerateChunk>, conversation: string): GenerateRequest => ({
  messages: [user1, { role: "assistant", content: answerOf(first) }, { role: "user", content: "and the crew" }],
  conversation,
  checkpoint: doneOf(first).checkpoint!,
  ...settings
})

describe("a runner SIGKILLed, its conversations' state files shared", () => {
  layer(cluster, { timeout: 300_000, excludeTestServices: true })("two runners on Unix sockets", (it) => {
    it.effect("a conversation saved before the kill is restored from its state file; one held only in the dead runner's slot is recomputed", () =>
      Effect.gen(function*() {
        const { members } = yield* KillCluster
        const [r1, r2] = members
        const snapshot = yield* settled(members)
        const [saved, filler, live] = yield* idsOwnedBy(snapshot, r2!, 3, "victim")
        // Three conversations on r2's two slots (through r1): `live` takes over the slot of `saved`,
        // the least recently used, whose KV goes to its state file; `filler` and `live` stay in slots only.
        const firstSaved = yield* collectFrom(r1!.provider(), { messages: [user1], conversation: saved!, ...settings })
        yield* collectFrom(r1!.provider(), { messages: [user1], conversation: filler!, ...settings })
        const firstLive = yield* collectFrom(r1!.provider(), { messages: [user1], conversation: live!, ...settings })
        // The same turns on one runtime, for the tokens: a conversation r1 holds, and its follow-up from its slot.
        const [alone] = yield* idsOwnedBy(snapshot, r1!, 1, "alone")
        const firstAlone = yield* collectFrom(r1!.provider(), { messages: [user1], conversation: alone!, ...settings })
        const secondAlone = yield* collectFrom(r1!.provider(), followUp(firstAlone, alone!))
        assert.strictEqual(doneOf(secondAlone).usage.reuse, "continuation")
        assert.deepStrictEqual(tokensOf(firstSaved), tokensOf(firstAlone))

        yield* r2!.kill
        // The follow-ups wait for r2's shards to move to r1 (the entry sends a turn lost before any token again).
        const restored = yield* collectFrom(r1!.provider(), followUp(firstSaved, saved!))
        assert.strictEqual(yield* holderOf(saved!), r1!.stored)
        assert.strictEqual(doneOf(restored).usage.reuse, "restored", "continued from the state file r2 saved")
        assert.deepStrictEqual(tokensOf(restored), tokensOf(secondAlone))
        const recomputed = yield* collectFrom(r1!.provider(), followUp(firstLive, live!))
        assert.include(["cold", "prefix"], doneOf(recomputed).usage.reuse, "its KV died with r2: recomputed from the transcript")
        assert.deepStrictEqual(tokensOf(recomputed), tokensOf(secondAlone))
      }), 240_000)
  })
})
