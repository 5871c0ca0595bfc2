/**
 * What a continued turn asks of the engine child before it generates, with a real child: one
 * RenderContinuation request (the child renders the chat and tokenizes what is new), not three
 * RenderText requests and two Tokenize requests in two round trips, whatever the length of the
 * history. The engine requests are counted by wrapping the runtime's own NativeWorker for a
 * Provider built on it; its new tokens equal what the host-side renders give.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import type { ChatMessage } from "../../src/domain/Inference.js"
import * as Continuation from "../../src/domain/Continuation.js"
import { NativeWorker } from "../../src/services/NativeWorker.js"
import * as Provider from "../../src/services/Provider.js"
import { runtimeLayer } from "../support/engine.js"
import { collectFrom, doneOf } from "../support/generation.js"

/** The runtime's worker, counting the requests a turn's prompt makes of the child (all but the generation itself). */
const countingWorker = Effect.map(NativeWorker, (worker) => {
  const counts = new Map<string, number>()
  const count = <A extends ReadonlyArray<unknown>, B>(name: string, f: (...args: A) => B) => (...args: A): B => {
    counts.set(name, (counts.get(name) ?? 0) + 1)
    return f(...args)
  }
  const counted: NativeWorker["Type"] = {
    ...worker,
    render: count("Render", worker.render),
    renderText: count("RenderText", worker.renderText),
    tokenize: count("Tokenize", worker.tokenize),
    renderContinuation: count("RenderContinuation", worker.renderContinuation)
  }
  return { counted, counts }
})

const words = (n: number, seed: number) => Array.from({ length: n }, (_, i) => ["sea", "ship", "wind", "sail", "star"][(i * 7 + seed) % 5]).join(" ")

describe("a continued turn's engine requests", () => {
  layer(runtimeLayer(), { timeout: 240_000, excludeTestServices: true })("tiny model", (it) => {
    it.scoped("one request renders and tokenizes the new turn in the child, for short and long histories", () =>
      Effect.gen(function*() {
        const { counted, counts } = yield* countingWorker
        const provider = yield* Provider.make.pipe(Effect.provideService(NativeWorker, counted), Effect.provideService(Provider.ProviderConfig, { prefillChunk: 128 }))
        for (const [n, size] of [[0, 8], [1, 400]] as const) {
          const conversation = `requests-${n}`
          const user1: ChatMessage = { role: "user", content: words(size, n) }
          const one = doneOf(yield* collectFrom(provider, { messages: [user1], conversation, maxTokens: 3, sampling: { temperature: 0 } }))
          const history: ReadonlyArray<ChatMessage> = [user1, { role: "assistant", content: "sea ship" }]
          const turn: ReadonlyArray<ChatMessage> = [{ role: "user", content: words(12, n + 2) }]
          counts.clear()
          const two = doneOf(yield* collectFrom(provider, {
            messages: [...history, ...turn],
            conversation,
            checkpoint: one.checkpoint!,
            maxTokens: 2,
            sampling: { temperature: 0 }
          }))
          assert.strictEqual(two.usage.reuse, "continuation")
          assert.deepStrictEqual(Object.fromEntries(counts), { RenderContinuation: 1 }, `history of ${size} words`)
          // The child's new tokens: what the renders of the same chat give, taken apart in the host.
          const worker = yield* NativeWorker
          const parts = Continuation.continuationTexts({
            assistantPrompt: yield* worker.renderText("generation", history.slice(0, -1), true),
            history: yield* worker.renderText("generation", history, false),
            full: yield* worker.renderText("generation", [...history, ...turn], true)
          }, "sea ship")
          if (typeof parts === "string") return assert.fail(parts)
          const expected = [...(yield* worker.tokenize("generation", parts.closing, true)), ...(yield* worker.tokenize("generation", parts.turn, true))]
          const added = yield* worker.renderContinuation("generation", history, turn, {}, {})
          assert.deepStrictEqual(added, { tokens: expected })
          assert.strictEqual(two.usage.promptTokens, one.checkpoint!.tokens + expected.length)
        }
      }))
  })
})
