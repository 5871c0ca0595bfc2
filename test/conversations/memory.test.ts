/**
 * Host memory stays bounded however many conversations pass: short conversations (real turns on
 * the tiny model, one token each) through the Provider. The heap is measured after full garbage
 * collections (gc exposed through V8's flags).
 *
 * `npm run test:long` (NATIVEGEN_LONG_TESTS=1) runs the issue's figure: 20,000 conversations of
 * ~316 tokens with the default bounds (about 11 minutes here; unbounded, the heap grew ~80 MiB).
 * The default suite runs 1,000 conversations of ~1,400 tokens with a bound of 256 records, so that
 * unbounded records (~10 MiB) would exceed the stated bound just as surely, in about a minute here.
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
  // Token records are typed arrays, whose bytes live outside the JS heap: count both.
  const { heapUsed, arrayBuffers } = process.memoryUsage()
  return heapUsed + arrayBuffers
}

const long = process.env.NATIVEGEN_LONG_TESTS === "1"
const CONVERSATIONS = long ? 20_000 : 1_000
const maxHeldConversations = long ? ConversationsConfig.defaults.maxHeldConversations : 256
/** Repeats of the system prompt's sentence: ~316 tokens per conversation in the long run, ~1,400 in the short one. */
const systemRepeats = long ? 12 : 60
/** Heap growth allowed beyond the records the bound keeps. */
const slack = (long ? 8 : 2) * 1024 * 1024
const MiB = 1024 * 1024

describe("memory", () => {
  layer(runtimeLayer({ conversations: { maxHeldConversations } }), { timeout: 120_000, excludeTestServices: true })("default bounds", (it) => {
    it.effect(`${CONVERSATIONS} conversations: the heap after them stays under a stated bound; forgotten ones are unknown`, () =>
      Effect.gen(function*() {
        const system: ChatMessage = { role: "system", content: "you keep the ship log of a long voyage. ".repeat(systemRepeats) }
        const turn = (i: number) =>
          collect({
            messages: [system, { role: "user", content: `entry ${i}: the wind, the sail and the crew at night` }],
            conversation: `voyage-${i}`,
            maxTokens: 1
          })
        const warmUp = long ? 500 : 300
        const first = done(yield* turn(0)).checkpoint!
        for (let i = 1; i < warmUp; i++) yield* turn(i)
        const before = heapAfterGc()
        const started = Date.now()
        let last = first
        for (let i = warmUp; i < warmUp + CONVERSATIONS; i++) last = done(yield* turn(i)).checkpoint!
        const seconds = (Date.now() - started) / 1000
        const after = heapAfterGc()
        // The records kept: at most maxHeldConversations of them, each its tokens (4 bytes), its id and the overhead.
        const recordBytes = maxHeldConversations * (last.tokens * 4 + ENTRY_OVERHEAD_BYTES + 2 * "voyage-00000".length)
        const bound = recordBytes + slack
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
