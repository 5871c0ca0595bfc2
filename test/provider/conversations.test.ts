/**
 * Conversation reuse with a real engine child: continuation from a checkpoint, static-prefix
 * reuse, LRU eviction to a state file and restore, restart of the runtime between turns, and
 * preparation (also preempted at random points). Parity: a turn's greedy output after any reuse
 * equals a cold run (nothing reused) of exactly the same prompt tokens: bit for bit where reuse
 * kept whole prefill chunks, up to a near tie where the held history was decoded token by token.
 */
import { assert, describe, it, layer } from "@effect/vitest"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Duration from "effect/Duration"
import * as Layer from "effect/Layer"
import * as Schedule from "effect/Schedule"
import * as fc from "fast-check"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import type { ChatMessage, Checkpoint, GenerateRequest } from "../../src/domain/Inference.js"
import { Conversations, hashTokens } from "../../src/services/Conversations.js"
import { NativeWorker } from "../../src/services/NativeWorker.js"
import { Provider } from "../../src/services/Provider.js"
import * as Scheduler from "../../src/services/Scheduler.js"
import { runtimeLayer } from "../support/engine.js"
import { answerOf, collect, doneOf as done, probabilitiesOf, tokensOf } from "../support/generation.js"
import { assertCloseParity, cold } from "../conversations/support.js"

const words = ["sea", "ship", "harbor", "wind", "sail", "crew", "light", "storm", "calm", "night", "map", "star"]
const sentence = fc.array(fc.constantFrom(...words), { minLength: 2, maxLength: 12 }).map((w) => w.join(" "))

/** The prompt a turn ran on: what the conversation holds after it, minus the output. */
const promptOfTurn = (conversation: string, generated: number) =>
  Effect.map(Conversations, (c) => {
    const held = c.held(conversation)!
    return held.slice(0, held.length - generated)
  })

/** Runs a turn and checks parity with a cold run of its exact prompt; returns the Done chunk and answer. */
const turnWithParity = (request: GenerateRequest) =>
  Effect.gen(function*() {
    const chunks = yield* collect({ ...request, probabilities: true })
    const d = done(chunks)
    const prompt = yield* promptOfTurn(request.conversation ?? request.checkpoint!.conversation, d.usage.generatedTokens)
    assert.strictEqual(prompt.length, d.usage.promptTokens)
    const reference = yield* cold(prompt, request.maxTokens ?? assert.fail("the cold run needs the turn's maxTokens"))
    const turn = { tokens: tokensOf(chunks), probabilities: probabilitiesOf(chunks) }
    if (d.usage.reuse === "continuation" || d.usage.reuse === "restored") {
      // The held history was decoded one token per step, unlike the cold run's chunks.
      assertCloseParity(turn, reference, d.usage.reuse)
    } else {
      // Reuse kept whole prefill chunks only: the same batches as the cold run, bit-identical.
      assert.deepStrictEqual(turn.tokens, reference.tokens)
      assert.deepStrictEqual(turn.probabilities, reference.probabilities, `${d.usage.reuse}: probabilities differ`)
      assert.strictEqual(d.usage.reusedTokens % 128, 0, "reuse ends on the prefill chunk grid")
    }
    return { done: d, answer: answerOf(chunks) }
  })

const tempDir = () => Fs.mkdtempSync(Path.join(Os.tmpdir(), "nativegen-conversations-"))

describe("conversation reuse", () => {
  const directory = tempDir()
  layer(runtimeLayer({ conversationsDirectory: directory }), { timeout: 240_000, excludeTestServices: true })("two conversation slots", (it) => {
    it.effect("continuation from a checkpoint prefills only the new turn; output equals a cold run (property)", () =>
      Effect.gen(function*() {
        const context = yield* Effect.context<Provider | NativeWorker | Conversations | Scheduler.Scheduler>()
        let n = 0
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(sentence, sentence, fc.integer({ min: 3, max: 12 }), fc.integer({ min: 3, max: 12 }), (first, second, max1, max2) =>
              Effect.runPromise(Effect.gen(function*() {
                const conversation = `parity-${n++}`
                const user1: ChatMessage = { role: "user", content: first }
                const one = yield* turnWithParity({ messages: [user1], conversation, maxTokens: max1, sampling: { temperature: 0 } })
                assert.strictEqual(one.done.checkpoint?.tokens, one.done.usage.promptTokens + max1)
                const two = yield* turnWithParity({
                  messages: [user1, { role: "assistant", content: one.answer }, { role: "user", content: second }],
                  conversation,
                  checkpoint: one.done.checkpoint!,
                  maxTokens: max2,
                  sampling: { temperature: 0 }
                })
                assert.strictEqual(two.done.usage.reuse, "continuation")
                // Everything held was reused but the last output token (sampled, never evaluated).
                assert.strictEqual(two.done.usage.reusedTokens, one.done.checkpoint!.tokens - 1)
              }).pipe(Effect.provide(context)))
            ),
            // The example is a near tie in the second turn's second token (0.07725 vs 0.07726),
            // which the two batch splits decide differently (found by CI, seed 1122415972).
            { numRuns: 5, examples: [["wind calm map crew crew storm ship wind light night light map", "crew wind", 11, 3]] }
          )
        )
      }))

    it.effect("a changed earlier message keeps the longest matching prefix (static-prefix reuse)", () =>
      Effect.gen(function*() {
        const system: ChatMessage = { role: "system", content: "you are a sailor who answers in short words. ".repeat(30) }
        const one = yield* turnWithParity({
          messages: [system, { role: "user", content: "where is the ship" }],
          conversation: "prefix",
          maxTokens: 6
        })
        const two = yield* turnWithParity({
          messages: [system, { role: "user", content: "where is the harbor light" }],
          conversation: "prefix",
          maxTokens: 6
        })
        assert.strictEqual(two.done.usage.reuse, "prefix")
        // The longest matching prefix, rounded down to whole prefill chunks.
        const prompts = [
          yield* (yield* Provider).count({ messages: [system, { role: "user", content: "where is the ship" }] }),
          yield* (yield* Provider).count({ messages: [system] })
        ]
        assert.isAbove(two.done.usage.reusedTokens, 128)
        assert.isAbove(two.done.usage.reusedTokens, prompts[1]!.tokens - 128)
        assert.isBelow(two.done.usage.reusedTokens, prompts[0]!.tokens)
        assert.isBelow(two.done.usage.reusedTokens, one.done.usage.promptTokens)
      }))

    it.effect("invalid checkpoints are typed errors: wrong hash, beyond the held length, another conversation's, unknown", () =>
      Effect.gen(function*() {
        const messages: Array<ChatMessage> = [{ role: "user", content: "hello sea" }]
        const a = done(yield* collect({ messages, conversation: "a", maxTokens: 4 })).checkpoint!
        yield* collect({ messages, conversation: "b", maxTokens: 4 })
        const next = (checkpoint: Checkpoint, conversation = checkpoint.conversation) =>
          Effect.flip(collect({
            messages: [...messages, { role: "assistant", content: "x" }, { role: "user", content: "more" }],
            conversation,
            checkpoint,
            maxTokens: 4
          }))
        const cases: ReadonlyArray<[ReturnType<typeof next>, RegExp]> = [
          [next({ ...a, hash: "0".repeat(64) }), /hash 0+ does not match the held tokens/],
          [next({ ...a, tokens: a.tokens + 1 }), new RegExp(`checkpoint of ${a.tokens + 1} tokens is beyond the ${a.tokens} held`)],
          [next(a, "b"), /belongs to conversation a/],
          [next({ ...a, conversation: "nobody" }), /nothing is held for this conversation/]
        ]
        for (const [attempt, message] of cases) {
          const error = yield* attempt
          assert.strictEqual(error._tag, "InvalidCheckpoint")
          assert.match(error.message, message)
        }
        // A checkpoint at an earlier point of what is held is valid (a shorter prefix).
        const conversations = yield* Conversations
        const held = conversations.held("a")!
        const earlier = { conversation: "a", tokens: held.length - 2, hash: hashTokens(held.slice(0, -2)) }
        const ok = done(yield* collect({ messages: [{ role: "user", content: "again" }], checkpoint: earlier, maxTokens: 3 }))
        assert.strictEqual(ok.usage.reuse, "continuation")
      }))

    it.effect("utility calls between turns leave the conversation's checkpoint and cache intact", () =>
      Effect.gen(function*() {
        const user1: ChatMessage = { role: "user", content: "name three stars" }
        const one = done(yield* collect({ messages: [user1], conversation: "kept", maxTokens: 5 }))
        for (const content of ["summarize the storm", "translate calm night", "list the crew"]) {
          yield* collect({ messages: [{ role: "user", content }], lane: "utility", maxTokens: 5 })
        }
        const two = yield* turnWithParity({
          messages: [user1, { role: "assistant", content: "x" }, { role: "user", content: "and one more" }],
          conversation: "kept",
          checkpoint: one.checkpoint!,
          maxTokens: 5
        })
        assert.strictEqual(two.done.usage.reuse, "continuation")
        assert.strictEqual(two.done.usage.reusedTokens, one.checkpoint!.tokens - 1)
      }))

    it.effect("LRU eviction saves to a state file; the next turn restores it; a tampered one is moved aside and recomputed", () =>
      Effect.gen(function*() {
        const user: ChatMessage = { role: "user", content: "the old map shows a storm" }
        const first = done(yield* collect({ messages: [user], conversation: "evicted", maxTokens: 5 })).checkpoint!
        // Two more conversations take both slots: "evicted" is the least recently used.
        const evict = Effect.forEach(["one", "two"], (content, i) =>
          collect({ messages: [{ role: "user", content }], conversation: `other-${i}`, maxTokens: 3 }))
        yield* evict
        const modelDir = Fs.readdirSync(directory).map((d) => Path.join(directory, d))[0]!
        const sidecar = Path.join(modelDir, `${Crypto.createHash("sha256").update("evicted").digest("hex")}.json`)
        const state = sidecar.replace(/\.json$/, ".state")
        assert.strictEqual(JSON.parse(Fs.readFileSync(sidecar, "utf8")).conversation, "evicted")
        const turn2 = {
          messages: [user, { role: "assistant" as const, content: "x" }, { role: "user" as const, content: "where" }],
          conversation: "evicted",
          checkpoint: first,
          maxTokens: 5
        }
        const restored = yield* turnWithParity(turn2)
        assert.strictEqual(restored.done.usage.reuse, "restored")
        assert.strictEqual(restored.done.usage.reusedTokens, first.tokens - 1)
        // Evicted again, its state file tampered with: refused before the engine, moved aside, and
        // the turn recomputes the history from the conversation's tokens.
        yield* evict
        const flipped = Fs.readFileSync(state)
        flipped[flipped.length - 1] ^= 0xff
        Fs.writeFileSync(state, flipped)
        const recomputed = yield* turnWithParity({
          messages: [...turn2.messages, { role: "assistant", content: restored.answer }, { role: "user", content: "and then" }],
          conversation: "evicted",
          checkpoint: restored.done.checkpoint!,
          maxTokens: 5
        })
        assert.include(["cold", "prefix"], recomputed.done.usage.reuse)
        assert.isFalse(Fs.existsSync(state))
        assert.isTrue(Fs.readdirSync(modelDir).some((f) => f.startsWith(`${Path.basename(state)}.bad-sha256-`)))
        assert.isNull(JSON.parse(Fs.readFileSync(sidecar, "utf8")).state)
      }))

    it.effect("preparing a conversation keeps the checkpoint its client holds valid", () =>
      Effect.gen(function*() {
        const provider = yield* Provider
        const user: ChatMessage = { role: "user", content: "log the wind and the sail at night. ".repeat(20) }
        const one = yield* turnWithParity({ messages: [user], conversation: "prepared-after-turn", maxTokens: 5 })
        const history: ReadonlyArray<ChatMessage> = [user, { role: "assistant", content: one.answer }]
        const preparation = yield* provider.prepare({ conversation: "prepared-after-turn", prefix: [], history })
        assert.isAbove(preparation.preparedTokens, 0)
        // The checkpoint from before the preparation still proves the conversation's tokens.
        const two = yield* turnWithParity({
          messages: [...history, { role: "user", content: "and the stars" }],
          conversation: "prepared-after-turn",
          checkpoint: one.done.checkpoint!,
          maxTokens: 5
        })
        assert.strictEqual(two.done.checkpoint?.tokens, two.done.usage.promptTokens + 5)
        assert.isAbove(two.done.usage.reusedTokens, 0)
      }))

    it.effect("preparation prefills on the chunk grid; the next turn reuses it; preempted at random points it keeps what it did", () =>
      Effect.gen(function*() {
        const provider = yield* Provider
        const prefix: ReadonlyArray<ChatMessage> = [{ role: "system", content: "you keep the ship log. ".repeat(20) }]
        const history: ReadonlyArray<ChatMessage> = [
          { role: "user", content: "log the wind and the sail at night. ".repeat(12) },
          { role: "assistant", content: "logged the storm and the calm. ".repeat(12) }
        ]
        const result = yield* provider.prepare({ conversation: "prepared", prefix, history })
        assert.isTrue(result.complete)
        assert.strictEqual(result.preparedTokens % 128, 0)
        assert.isAbove(result.preparedTokens, 256)
        const turn = yield* turnWithParity({
          messages: [...prefix, ...history, { role: "user", content: "what now" }],
          conversation: "prepared",
          maxTokens: 5
        })
        assert.strictEqual(turn.done.usage.reuse, "prepared")
        assert.isAtLeast(turn.done.usage.reusedTokens, result.preparedTokens)

        const context = yield* Effect.context<Provider | NativeWorker | Conversations | Scheduler.Scheduler>()
        const scheduler = yield* Scheduler.Scheduler
        const longHistory: ReadonlyArray<ChatMessage> = [
          { role: "user", content: "log the wind and the sail at night. ".repeat(60) },
          { role: "assistant", content: "logged the storm and the calm. ".repeat(60) }
        ]
        // How long a whole preparation of it takes here, now: the random points fall within it, so
        // they land inside the prefill however loaded the machine is.
        const started = yield* Clock.currentTimeMillis
        yield* provider.prepare({ conversation: "calibration", prefix, history: longHistory })
        const whole = Math.max(1, Math.round((yield* Clock.currentTimeMillis) - started))
        let n = 0
        const outcomes: Array<string> = []
        /** One preparation, preempted by a turn `millis` after it holds its slot; the turn equals a cold run. */
        const preemptedAt = (millis: number) =>
          Effect.gen(function*() {
            const conversation = `preempted-${n++}`
            const preparation = yield* Effect.fork(provider.prepare({ conversation, prefix, history: longHistory }))
            // Once the preparation holds its slot, the turn arrives after a random delay: a
            // random point in its prefill (correctness must hold at any point, so this is not
            // synchronisation).
            yield* scheduler.status.pipe(Effect.repeat({ until: (s) => s.running > 0, schedule: Schedule.spaced("1 millis") }))
            yield* Effect.sleep(Duration.millis(millis))
            const chunks = yield* collect({ messages: [...prefix, ...longHistory, { role: "user", content: "now" }], conversation, maxTokens: 4 })
            const prepared = yield* Fiber.join(preparation)
            outcomes.push(prepared.complete ? "complete" : `partial ${prepared.preparedTokens}`)
            const d = done(chunks)
            // Whatever preparation prefilled before it was preempted was reused, none recomputed.
            assert.isAtLeast(d.usage.reusedTokens, prepared.preparedTokens)
            const prompt = yield* promptOfTurn(conversation, d.usage.generatedTokens)
            assert.deepStrictEqual(tokensOf(chunks), (yield* cold(prompt, 4)).tokens)
          }).pipe(Effect.provide(context))
        yield* Effect.promise(() =>
          fc.assert(fc.asyncProperty(fc.integer({ min: 0, max: whole }), (millis) => Effect.runPromise(preemptedAt(millis))), { numRuns: 6 })
        )
        console.info(`preparations preempted at random points within ${whole} ms: ${outcomes.join(", ")}`)
        // Whether any point lands inside the prefill depends on the machine's load: on a loaded one
        // a preempted preparation reports 0 tokens or completes (seen in CI: 18 of 18), so the
        // outcomes are reported, and the rule above is what is checked at every point.
      }))
  })

  const bounded = tempDir()
  layer(runtimeLayer({ conversationsDirectory: bounded, conversationsMaxSaved: 1, scheduler: { slots: 1 } }), {
    timeout: 120_000,
    excludeTestServices: true
  })("one slot, one state file kept", (it) => {
    it.effect("state files are bounded: the oldest is deleted, and its conversation is recomputed, not lost", () =>
      Effect.gen(function*() {
        const user: ChatMessage = { role: "user", content: "the first log of the voyage" }
        const first = done(yield* collect({ messages: [user], conversation: "oldest", maxTokens: 4 })).checkpoint!
        // Each new conversation takes the only slot and saves the previous one; one file is kept.
        yield* collect({ messages: [{ role: "user", content: "second" }], conversation: "middle", maxTokens: 3 })
        yield* collect({ messages: [{ role: "user", content: "third" }], conversation: "newest", maxTokens: 3 })
        const modelDir = Path.join(bounded, Fs.readdirSync(bounded)[0]!)
        const kept = Fs.readdirSync(modelDir).filter((f) => f.endsWith(".json"))
        assert.deepStrictEqual(kept.map((f) => JSON.parse(Fs.readFileSync(Path.join(modelDir, f), "utf8")).conversation), ["middle"])
        assert.strictEqual(Fs.readdirSync(modelDir).filter((f) => f.endsWith(".state")).length, 1)
        // The oldest conversation's tokens are still known: its checkpoint is valid, its prompt recomputed.
        const next = yield* turnWithParity({
          messages: [user, { role: "assistant", content: "x" }, { role: "user", content: "go on" }],
          conversation: "oldest",
          checkpoint: first,
          maxTokens: 4
        })
        assert.notStrictEqual(next.done.usage.reuse, "restored")
        assert.isBelow(next.done.usage.reusedTokens, first.tokens - 1)
      }))

    it.effect("a turn of another conversation that needs the only slot preempts a preparation holding it", () =>
      Effect.gen(function*() {
        const provider = yield* Provider
        const scheduler = yield* Scheduler.Scheduler
        const history: ReadonlyArray<ChatMessage> = [
          { role: "user", content: "log the wind and the sail at night. ".repeat(200) },
          { role: "assistant", content: "logged. ".repeat(10) }
        ]
        const preparation = yield* Effect.fork(provider.prepare({ conversation: "slow", prefix: [], history }))
        yield* scheduler.status.pipe(Effect.repeat({ until: (s) => s.running > 0, schedule: Schedule.spaced("1 millis") }))
        const other = done(yield* collect({ messages: [{ role: "user", content: "quick" }], conversation: "quick", maxTokens: 3 }))
        assert.strictEqual(other.usage.generatedTokens, 3)
        const prepared = yield* Fiber.join(preparation)
        assert.isFalse(prepared.complete, `preparation finished first: ${JSON.stringify(prepared)}`)
        assert.isBelow(prepared.preparedTokens, prepared.totalTokens)
      }))
  })

  it.effect("checkpoints survive a restart of the runtime", () =>
    Effect.gen(function*() {
      const dir = tempDir()
      const user: ChatMessage = { role: "user", content: "remember the harbor" }
      const runtime = () => Layer.build(runtimeLayer({ conversationsDirectory: dir }))
      const first = yield* Effect.scoped(Effect.gen(function*() {
        const context = yield* runtime()
        return done(yield* collect({ messages: [user], conversation: "durable", maxTokens: 5 }).pipe(Effect.provide(context))).checkpoint!
      }))
      // A new runtime (new engine child, nothing in memory) continues from the checkpoint.
      yield* Effect.scoped(Effect.gen(function*() {
        const context = yield* runtime()
        const next = done(yield* collect({
          messages: [user, { role: "assistant", content: "x" }, { role: "user", content: "and now?" }],
          conversation: "durable",
          checkpoint: first,
          maxTokens: 5
        }).pipe(Effect.provide(context)))
        assert.strictEqual(next.usage.reuse, "restored")
        assert.strictEqual(next.usage.reusedTokens, first.tokens - 1)
        assert.strictEqual(Context.get(context, Provider) !== undefined, true)
      }))
    }), { timeout: 120_000 })
})
