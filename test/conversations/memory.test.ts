/**
 * Host memory stays bounded however many conversations pass: 20,000 short conversations (real
 * turns on the tiny model, one token each) through the Provider with the default bounds on token
 * records. The heap is measured after full garbage collections (gc exposed through V8's flags).
 * Each conversation's record is ~170 tokens; unbounded, 20,000 of them would hold ~30 MB.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as V8 from "node:v8"
import * as Vm from "node:vm"
import type { ChatMessage } from "../../src/domain/Inference.js"
import { Conversations, ConversationsConfig } from "../../src/services/Conversations.js"
import { ENTRY_OVERHEAD_BYTES } from "../../src/services/conversations/Records.js"
import { runtimeLayer } from "../support/engine.js"
import { collect, done } from "./support.js"

V8.setFlagsFromString("--expose-gc")
const gc: () => void = Vm.runInNewContext("gc")

const heapAfterGc = () => {
  gc()
  gc()
  return process.memoryUsage().heapUsed
}

const CONVERSATIONS = 20_000
const MiB = 1024 * 1024

describe("memory", () => {
  layer(runtimeLayer(), { timeout: 120_000, excludeTestServices: true })("default bounds", (it) => {
    it.effect(`${CONVERSATIONS} conversations: the heap after them stays under a stated bound; forgotten ones are unknown`, () =>
      Effect.gen(function*() {
        const system: ChatMessage = { role: "system", content: "you keep the ship log of a long voyage. ".repeat(12) }
        const turn = (i: number) =>
          collect({
            messages: [system, { role: "user", content: `entry ${i}: the wind, the sail and the crew at night` }],
            conversation: `voyage-${i}`,
            maxTokens: 1
          })
        const warmUp = 500
        const first = done(yield* turn(0)).checkpoint!
        for (let i = 1; i < warmUp; i++) yield* turn(i)
        const before = heapAfterGc()
        const started = Date.now()
        let last = first
        for (let i = warmUp; i < warmUp + CONVERSATIONS; i++) last = done(yield* turn(i)).checkpoint!
        const seconds = (Date.now() - started) / 1000
        const after = heapAfterGc()
        // The records kept: at most maxHeldConversations of them, each its tokens (4 bytes), its id and the overhead.
        const recordBytes = ConversationsConfig.defaults.maxHeldConversations * (last.tokens * 4 + ENTRY_OVERHEAD_BYTES + 2 * "voyage-00000".length)
        const bound = recordBytes + 8 * MiB
        console.info(
          `${CONVERSATIONS} conversations in ${seconds.toFixed(1)} s (${(seconds * 1000 / CONVERSATIONS).toFixed(2)} ms each); ` +
            `${last.tokens} tokens each; heap ${(before / MiB).toFixed(1)} -> ${(after / MiB).toFixed(1)} MiB ` +
            `(growth ${((after - before) / MiB).toFixed(1)} MiB, bound ${(bound / MiB).toFixed(1)} MiB)`
        )
        assert.isBelow(after - before, bound)
        // The oldest were forgotten (no state files here): unknown, a typed error, not a crash.
        const forgotten = yield* Effect.flip(collect({
          messages: [system, { role: "user", content: "entry 0" }, { role: "assistant", content: "x" }, { role: "user", content: "more" }],
          checkpoint: first,
          maxTokens: 1
        }))
        assert.strictEqual(forgotten._tag, "InvalidCheckpoint")
        assert.match(forgotten.message, /nothing is held for this conversation/)
        // The newest are held.
        assert.isDefined((yield* Conversations).held(last.conversation))
      }), { timeout: 3_600_000 })
  })
})
