/**
 * @effect/ai's own API over nativegen, on a real engine child with the scripted qwen-chat model
 * (it thinks, then answers): generateText and streamText (reasoning apart from the answer, parts
 * in order, the true finish reason and usage), a Chat whose later turns continue the conversation
 * from its cache, a stream cancelled part way (the Provider's generation is interrupted and the
 * scheduler runs nothing after), failures as AiErrors with the original as cause, the same
 * answer through a remote Provider (Client.layer), the Tokenizer's exact tokens, and a kept
 * checkpoint that a restarted runtime no longer holds, dropped without failing the turn.
 */
import type * as AiError from "@effect/ai/AiError"
import * as Chat from "@effect/ai/Chat"
import * as LanguageModel from "@effect/ai/LanguageModel"
import type * as Prompt from "@effect/ai/Prompt"
import * as Tokenizer from "@effect/ai/Tokenizer"
import { assert, describe, it, layer } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Path from "node:path"
import * as Queue from "effect/Queue"
import * as Ref from "effect/Ref"
import * as Schedule from "effect/Schedule"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import { ensureModel } from "../../fixtures/models.js"
import { NativegenLanguageModel, NativegenTokenizer } from "../../src/ai/index.js"
import type { ChatMessage, GenerateChunk } from "../../src/domain/Inference.js"
import { ContextExceeded } from "../../src/services/AdmissionError.js"
import * as Client from "../../src/rpc/Client.js"
import * as Server from "../../src/rpc/Server.js"
import { Provider } from "../../src/services/Provider.js"
import { runtimeLayer } from "../support/engine.js"
import { tempDir } from "../rpc/support/serve.js"
import { storeLayer } from "../store/helpers.js"

/** A generation the Provider started, as the test sees it. */
interface Observed {
  /** Completes when the Provider's stream is closed. */
  readonly ended: Deferred.Deferred<void>
  /** The tags of the chunks it delivered. */
  readonly delivered: Array<GenerateChunk["_tag"]>
}

/** One entry per generation the Provider starts. */
class Generations extends Context.Tag("test/ai/Generations")<Generations, Queue.Queue<Observed>>() {}

/** The runtime over qwen-chat, its Provider observed. */
const engine = Layer.scopedContext(Effect.gen(function*() {
  const runtime = yield* Layer.build(runtimeLayer({}, { generation: ensureModel("qwen-chat") }))
  const embedded = Context.get(runtime, Provider)
  const generations = yield* Queue.unbounded<Observed>()
  const observed = Provider.of({
    ...embedded,
    generate: (request) =>
      Stream.unwrapScoped(Effect.gen(function*() {
        const generation: Observed = { ended: yield* Deferred.make<void>(), delivered: [] }
        yield* Effect.addFinalizer(() => Deferred.succeed(generation.ended, undefined))
        yield* Queue.offer(generations, generation)
        return Stream.tap(embedded.generate(request), (chunk) => Effect.sync(() => generation.delivered.push(chunk._tag)))
      }))
  })
  return Context.make(Provider, observed).pipe(Context.add(Generations, generations))
}))

const testLayer = Layer.mergeAll(NativegenLanguageModel.layer(), NativegenTokenizer.layer).pipe(Layer.provideMerge(engine))

const answer = "\n\nHello! I am the nativegen seed model."

/** The finish part's nativegen metadata. */
const nativegenOf = (response: LanguageModel.GenerateTextResponse<{}>) => {
  const finish = response.content.find((part) => part.type === "finish")
  assert(finish?.type === "finish", "no finish part")
  const metadata = finish.metadata.nativegen
  assert(metadata !== undefined, "no nativegen metadata")
  return metadata
}

/** Consecutive equal entries once. */
const runs = <A>(values: ReadonlyArray<A>) => values.filter((v, i) => i === 0 || values[i - 1] !== v)

/** Waits until the scheduler runs and queues nothing (its status, polled). */
const idle = Effect.flatMap(Provider, (provider) =>
  provider.readiness.pipe(
    Effect.repeat({ schedule: Schedule.spaced("20 millis"), until: (r) => r.scheduler.running === 0 && r.scheduler.queued === 0 }),
    Effect.timeoutFail({ duration: "20 seconds", onTimeout: () => new Error("the scheduler kept running the cancelled generation") })
  ))

describe("@effect/ai LanguageModel over nativegen", () => {
  layer(testLayer, { timeout: 240_000, excludeTestServices: true })("qwen-chat, embedded", (it) => {
    it.effect("generateText: reasoning apart from the answer, finish reason stop, usage and metadata", () =>
      Effect.gen(function*() {
        const response = yield* LanguageModel.generateText({ prompt: "Hello" })
        assert.strictEqual(response.text, answer)
        assert.include(response.reasoningText ?? "", "The user greets me; a short, friendly reply fits.")
        assert.notInclude(response.text, "<think>")
        assert.strictEqual(response.finishReason, "stop")
        const counted = yield* (yield* Provider).count({ messages: [{ role: "user", content: "Hello" }] })
        assert.strictEqual(response.usage.inputTokens, counted.tokens)
        assert.isAbove(response.usage.reasoningTokens ?? 0, 0)
        assert.isAbove(response.usage.outputTokens ?? 0, response.usage.reasoningTokens ?? 0)
        assert.strictEqual(response.usage.totalTokens, counted.tokens + (response.usage.outputTokens ?? 0))
        const metadata = nativegenOf(response)
        assert.strictEqual(metadata.stopReason, "endOfGeneration")
        assert.isAbove(metadata.timings.totalMillis, 0)
        assert.strictEqual(metadata.checkpoint, undefined)
      }))

    it.effect("maxTokens (per call, withConfigOverride) ends with finish reason length", () =>
      Effect.gen(function*() {
        const whole = yield* LanguageModel.generateText({ prompt: "Hello" })
        // Cut three tokens into the answer.
        const maxTokens = (whole.usage.reasoningTokens ?? 0) + 5
        const response = yield* LanguageModel.generateText({ prompt: "Hello" }).pipe(
          NativegenLanguageModel.withConfigOverride({ maxTokens })
        )
        assert.strictEqual(response.finishReason, "length")
        assert.strictEqual(response.usage.outputTokens, maxTokens)
        assert.isTrue(answer.startsWith(response.text) && response.text.length < answer.length)
        assert.strictEqual(nativegenOf(response).stopReason, "maxTokens")
      }))

    it.effect("streamText: reasoning block, then text block, then finish; the deltas are generateText's", () =>
      Effect.gen(function*() {
        const parts = Chunk.toArray(yield* Stream.runCollect(LanguageModel.streamText({ prompt: "Hello" })))
        assert.deepStrictEqual(runs(parts.map((p) => p.type)), [
          "reasoning-start",
          "reasoning-delta",
          "reasoning-end",
          "text-start",
          "text-delta",
          "text-end",
          "finish"
        ])
        const deltas = (type: "text-delta" | "reasoning-delta") => parts.flatMap((p) => (p.type === type ? [p.delta] : [])).join("")
        const whole = yield* LanguageModel.generateText({ prompt: "Hello" })
        assert.strictEqual(deltas("text-delta"), whole.text)
        assert.strictEqual(deltas("reasoning-delta"), whole.reasoningText)
        const finish = parts.at(-1)
        assert(finish?.type === "finish")
        assert.deepStrictEqual(finish.usage, whole.usage)
      }))

    it.effect("Chat over three turns of one conversation: later turns continue from the cache", () =>
      Effect.gen(function*() {
        const chat = yield* Chat.empty
        const turn = (prompt: string) =>
          chat.generateText({ prompt }).pipe(NativegenLanguageModel.withConfigOverride({ conversation: "ai-chat" }))
        const one = yield* turn("Hello")
        const two = yield* turn("Who are you?")
        const three = yield* turn("Thanks")
        assert.deepStrictEqual([one.text, two.text, three.text], [answer, answer, answer])
        const [m1, m2, m3] = [nativegenOf(one), nativegenOf(two), nativegenOf(three)]
        assert.strictEqual(m2.reuse, "continuation")
        assert.strictEqual(m3.reuse, "continuation")
        // Everything held after a turn is reused (at most its last output token is evaluated again).
        for (const [response, before] of [[two, m1], [three, m2]] as const) {
          assert.isAtLeast(response.usage.cachedInputTokens ?? 0, before.checkpoint!.tokens - 1)
          assert.isAtMost(response.usage.cachedInputTokens ?? 0, before.checkpoint!.tokens)
        }
        assert.strictEqual(m3.checkpoint?.conversation, "ai-chat")
        const history = yield* chat.history
        assert.deepStrictEqual(history.content.map((m) => m.role), ["user", "assistant", "user", "assistant", "user", "assistant"])
      }))

    it.effect("a history that is not the kept turn's is sent without the checkpoint (prefix reuse, no error)", () =>
      Effect.gen(function*() {
        const inConversation = NativegenLanguageModel.withConfigOverride({ conversation: "ai-edited" })
        yield* LanguageModel.generateText({ prompt: "Hello" }).pipe(inConversation)
        const edited = yield* LanguageModel.generateText({
          prompt: [
            { role: "user", content: "Hello" },
            { role: "assistant", content: "something the model did not say" },
            { role: "user", content: "Who are you?" }
          ]
        }).pipe(inConversation)
        assert.strictEqual(edited.text, answer)
        assert.notStrictEqual(nativegenOf(edited).reuse, "continuation")
      }))

    it.effect("interrupting a stream part way interrupts the generation; the scheduler runs nothing after", () =>
      Effect.gen(function*() {
        const generations = yield* Generations
        yield* Queue.takeAll(generations)
        const parts = Chunk.toArray(yield* Stream.runCollect(Stream.take(LanguageModel.streamText({ prompt: "Hello" }), 2)))
        assert.deepStrictEqual(parts.map((p) => p.type), ["reasoning-start", "reasoning-delta"])
        const generation = yield* Queue.take(generations)
        yield* Deferred.await(generation.ended)
        assert.notInclude(generation.delivered, "Done")
        yield* idle
      }))

    it.effect("failures are AiErrors with the original as cause: a context overflow is MalformedInput", () =>
      Effect.gen(function*() {
        const error = yield* Effect.flip(
          LanguageModel.generateText({ prompt: "Hello" }).pipe(NativegenLanguageModel.withConfigOverride({ maxTokens: 1_000_000 }))
        )
        assert.strictEqual(error._tag, "MalformedInput")
        const cause = error.cause
        assert(cause instanceof ContextExceeded, `the cause is ${String(cause)}`)
        assert.strictEqual(error.description, cause.message)
      }))

    it.scoped("over Client.layer (a remote Provider) the answer and usage are the embedded one's", () =>
      Effect.gen(function*() {
        const provider = yield* Provider
        const dir = yield* tempDir
        const socketPath = Path.join(dir, "run", "nativegen.sock")
        yield* Layer.build(Server.layer({ ...Server.defaults, socketPath }).pipe(
          Layer.provide(Layer.succeed(Provider, provider)),
          Layer.provide(storeLayer(Path.join(dir, "store"), []))
        )).pipe(Effect.orDie)
        const remote = yield* Layer.build(NativegenLanguageModel.layer().pipe(Layer.provide(Client.layer({ socketPath })))).pipe(Effect.orDie)
        const viaSocket = yield* LanguageModel.generateText({ prompt: "Hello" }).pipe(Effect.provide(remote))
        const embedded = yield* LanguageModel.generateText({ prompt: "Hello" })
        assert.strictEqual(viaSocket.text, embedded.text)
        assert.strictEqual(viaSocket.reasoningText, embedded.reasoningText)
        assert.strictEqual(viaSocket.finishReason, embedded.finishReason)
        assert.strictEqual(viaSocket.usage.outputTokens, embedded.usage.outputTokens)
        // The remote Tokenizer (through the Tokenize rpc) gives the embedded tokens.
        const tokens = yield* Effect.flatMap(Tokenizer.Tokenizer, (t) => t.tokenize("Hello")).pipe(
          Effect.provide(NativegenTokenizer.layer.pipe(Layer.provide(Client.layer({ socketPath }))))
        )
        assert.deepStrictEqual(tokens, yield* Effect.flatMap(Tokenizer.Tokenizer, (t) => t.tokenize("Hello")))
      }))

    it.effect("Tokenizer: exact tokens through the template, counts equal Provider.count", () =>
      Effect.gen(function*() {
        const provider = yield* Provider
        const tokenizer = yield* Tokenizer.Tokenizer
        const messages: ReadonlyArray<ChatMessage> = [
          { role: "system", content: "You answer briefly." },
          { role: "user", content: "Hello" },
          { role: "assistant", content: "Hi." },
          { role: "user", content: "Who are you?" }
        ]
        const prompt: ReadonlyArray<Prompt.MessageEncoded> = [
          { role: "system", content: "You answer briefly." },
          { role: "user", content: "Hello" },
          { role: "assistant", content: "Hi." },
          { role: "user", content: "Who are you?" }
        ]
        const tokens = yield* tokenizer.tokenize(prompt)
        assert.strictEqual(tokens.length, (yield* provider.count({ messages })).tokens)
        assert.deepStrictEqual(tokens, [...(yield* provider.tokenize({ messages })).tokens])
        const short = yield* tokenizer.truncate(prompt, 30)
        assert.isAbove(short.content.length, 0)
        assert.isBelow(short.content.length, messages.length)
      }))
  })

  it.scoped("a kept checkpoint the runtime no longer holds (it restarted) is dropped and the turn sent without it", () =>
    Effect.gen(function*() {
      const first = yield* Scope.make()
      const current = yield* Ref.make(Context.get(yield* Layer.buildWithScope(runtimeLayer(), first), Provider))
      const provider = Provider.of({
        ...(yield* Ref.get(current)),
        generate: (request) => Stream.unwrap(Effect.map(Ref.get(current), (p) => p.generate(request)))
      })
      const model = yield* NativegenLanguageModel.make({ maxTokens: 6 }).pipe(Effect.provideService(Provider, provider))
      const inA = (effect: Effect.Effect<LanguageModel.GenerateTextResponse<{}>, AiError.AiError, LanguageModel.LanguageModel>) =>
        effect.pipe(NativegenLanguageModel.withConfigOverride({ conversation: "ai-a" }), Effect.provideService(LanguageModel.LanguageModel, model))
      const chat = yield* Chat.empty
      const one = yield* inA(chat.generateText({ prompt: "the first turn" }))
      assert.strictEqual(nativegenOf(one).checkpoint?.conversation, "ai-a")
      // The runtime restarts (nothing saved): it holds nothing for the conversation.
      yield* Scope.close(first, Exit.void)
      yield* Ref.set(current, Context.get(yield* Layer.build(runtimeLayer()), Provider))
      const two = yield* inA(chat.generateText({ prompt: "the second turn" }))
      assert.notStrictEqual(nativegenOf(two).reuse, "continuation")
      // That turn's own checkpoint is kept: the next turn continues.
      const three = yield* inA(chat.generateText({ prompt: "the third turn" }))
      assert.strictEqual(nativegenOf(three).reuse, "continuation")
    }), { timeout: 180_000 })
})
