/**
 * Issue 18's "foreground request during idle preparation" figure: a conversation's expected
 * prompt is being prefilled in the preparation lane (`Provider.prepare`, what the runtime does
 * while it is otherwise idle) when a 1-token foreground request arrives. Its time to the first
 * token, beyond the same request's on the idle engine, is the delay the preparation adds; the
 * figure divides it by one prefill chunk's time, measured from the same preparation run alone.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import type { Provider } from "../../src/services/Provider.js"
import * as Nativegen from "./Nativegen.js"
import { history, userPrompt } from "./Prompts.js"

export interface ForegroundRound {
  /** First token of the foreground request on the idle engine (ms from the call). */
  readonly idleMs: number
  /** First token of the same request submitted during a preparation (ms from the call). */
  readonly duringMs: number
  /** One prefill chunk's time: a preparation alone, over the chunks it prefilled. */
  readonly chunkMs: number
  /** Whether the preparation was still running when the foreground request got its first token. */
  readonly landed: boolean
}

/** One round; `seed` makes its conversations and prompt its own, `words` sizes the preparation. */
export const round = (provider: Provider["Type"], seed: string, words: number, prefillChunk: number): Effect.Effect<ForegroundRound> =>
  Effect.gen(function*() {
    const messages = userPrompt(`${seed}/foreground`, 8)
    const foreground = Effect.map(
      Nativegen.generate(provider, { messages, maxTokens: 1, sampling: { temperature: 0 } }),
      (g) => g.arrivals[0] ?? g.totalMillis
    )
    const prepare = (conversation: string) =>
      Effect.gen(function*() {
        const start = performance.now()
        const result = yield* provider.prepare({ conversation, prefix: [], history: history(`${seed}/${conversation}`, words) })
        return { ms: performance.now() - start, end: performance.now(), tokens: result.preparedTokens }
      }).pipe(Effect.orDie)
    // The foreground request once before (it leaves its prompt cached, as every run of it does).
    yield* foreground
    const idleMs = yield* foreground
    const alone = yield* prepare("alone")
    const chunkMs = alone.ms / Math.max(1, alone.tokens / prefillChunk)
    // Submitted a third of the way into a preparation of the same size.
    const preparing = yield* Effect.fork(prepare("during"))
    const submitAt = performance.now() + alone.ms / 3
    yield* Effect.sleep(Duration.millis(Math.max(0, submitAt - performance.now())))
    const submitted = performance.now()
    const duringMs = yield* foreground
    const firstToken = submitted + duringMs
    const during = yield* Fiber.join(preparing)
    return { idleMs, duringMs, chunkMs, landed: during.end > firstToken }
  })
