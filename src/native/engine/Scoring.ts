/**
 * Decision heads: teacher-forced log-likelihoods of each head's labels after a prompt on the
 * decision model's first sequence, turned into probabilities over the head (softmax) and ranks.
 * The prompt is prefilled once in chunks, each label is scored and erased again, and only whole
 * chunks of a cached prefix are kept, so a prompt always splits into the same batches and its
 * probabilities do not depend on what was scored before it.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import type { Token } from "node-llama-cpp"
import { type EngineError, EngineFailure } from "../../domain/EngineError.js"
import type { Failpoints } from "../Failpoints.js"
import type { DecisionHead, HeadScore, ScoreEvent } from "../Protocol.js"
import { checkPositiveInt, checkPromptTokens, invalid } from "./Checks.js"
import type { Native } from "./Llama.js"
import { wholeChunksCached } from "./PrefixReuse.js"
import { MAX_LABEL_OUTPUTS } from "./ResidentMemory.js"
import type { Residents } from "./Residents.js"

export interface Scoring {
  /**
   * Scores labels after a prompt, as a stream: a Prefilled event per prompt chunk, then Scored
   * (the last chunk and the labels are one step). Each chunk is its own step in the decision lane,
   * so a cancel lands at the next chunk and other lanes' steps can run between chunks.
   */
  readonly score: (
    prompt: ReadonlyArray<number>,
    heads: ReadonlyArray<DecisionHead>,
    prefillChunk: number
  ) => Stream.Stream<ScoreEvent, EngineError>
}

/** A head's labels with their log-likelihoods, softmax probabilities over the head, and ranks. */
const headScore = (
  head: DecisionHead,
  labelTokens: ReadonlyMap<string, ReadonlyArray<number>>,
  logLikelihoods: ReadonlyMap<string, number>
): HeadScore => {
  const lls = head.labels.map((l) => logLikelihoods.get(l)!)
  const max = Math.max(...lls)
  const weights = lls.map((ll) => (Number.isFinite(ll) ? Math.exp(ll - max) : 0))
  const total = weights.reduce((a, b) => a + b, 0)
  const probabilities = weights.map((w) => (total > 0 ? w / total : 1 / weights.length))
  const order = head.labels.map((_, i) => i).sort((a, b) => probabilities[b]! - probabilities[a]! || a - b)
  const ranks = new Array<number>(order.length)
  order.forEach((labelIndex, position) => (ranks[labelIndex] = position + 1))
  return {
    name: head.name,
    labels: head.labels.map((label, i) => ({
      label,
      tokens: labelTokens.get(label)!.length,
      logLikelihood: lls[i]!,
      probability: probabilities[i]!,
      rank: ranks[i]!
    }))
  }
}

/** Distinct head names, each head with distinct non-empty labels. */
const checkHeads = (heads: ReadonlyArray<DecisionHead>) =>
  Effect.gen(function*() {
    const names = new Set<string>()
    for (const head of heads) {
      if (names.has(head.name)) return yield* Effect.fail(invalid("head", head.name, "duplicate head name"))
      names.add(head.name)
      if (head.labels.length === 0) return yield* Effect.fail(invalid(`head ${head.name} labels`, [], "must not be empty"))
      const seen = new Set<string>()
      for (const label of head.labels) {
        if (label.length === 0) return yield* Effect.fail(invalid(`head ${head.name} label`, label, "must not be empty"))
        if (seen.has(label)) return yield* Effect.fail(invalid(`head ${head.name} labels`, label, "duplicate label"))
        seen.add(label)
      }
    }
  })

export const make = (
  { options, step }: Native,
  residents: Residents,
  failpoints: Failpoints | undefined
): Effect.Effect<Scoring> =>
  Effect.gen(function*() {
    /** The decision sequence serves one score at a time: a score's chunks are separate steps. */
    const scoring = yield* Effect.makeSemaphore(1)
    let scored = 0

    const score = (
      prompt: ReadonlyArray<number>,
      heads: ReadonlyArray<DecisionHead>,
      prefillChunk: number
    ): Stream.Stream<ScoreEvent, EngineError> =>
      Stream.unwrapScoped(Effect.gen(function*() {
        const r = yield* residents.resident("decision")
        if (prompt.length === 0) return yield* Effect.fail(invalid("prompt", [], "must not be empty"))
        if (heads.length === 0) return yield* Effect.fail(invalid("heads", [], "at least one head is needed"))
        yield* checkPositiveInt("prefillChunk", prefillChunk)
        yield* checkHeads(heads)
        yield* checkPromptTokens(prompt, r.vocabularySize)
        const sequence = r.sequences[0]!
        const context = prompt.slice(0, -1) as Array<Token>
        const lastPromptToken = prompt[prompt.length - 1]! as Token
        const labelTokens = new Map<string, ReadonlyArray<Token>>()
        for (const head of heads) for (const l of head.labels) labelTokens.set(l, r.model.tokenize(l, false))
        for (const [label, tokens] of labelTokens) {
          if (tokens.length > MAX_LABEL_OUTPUTS) {
            return yield* Effect.fail(invalid("label", label, `is ${tokens.length} tokens; a label has at most ${MAX_LABEL_OUTPUTS}`))
          }
        }
        const longest = Math.max(...Array.from(labelTokens.values(), (t) => t.length))
        if (prompt.length + longest > r.context.contextSize) {
          return yield* Effect.fail(
            invalid("prompt", prompt.length, `prompt + longest label (${longest}) exceeds context ${r.context.contextSize}`)
          )
        }
        if (failpoints?.failScore === true) {
          return yield* Effect.fail(new EngineFailure({ operation: "score", reason: "failpoint failScore" }))
        }
        if (failpoints?.hangScore === true && scored++ > 0) return yield* Effect.never
        yield* Effect.acquireRelease(scoring.take(1), () => scoring.release(1))
        const chunk = Math.min(prefillChunk, options.batchSize)
        /** Teacher-forced log-likelihood of one label after the prefilled prompt; the label is erased again. */
        const labelLogLikelihood = async (tokens: ReadonlyArray<Token>) => {
          const items = [lastPromptToken, ...tokens.slice(0, -1)].map(
            (token) => [token, { generateNext: { probabilities: true, options: { temperature: 0 } } }] as [Token, { generateNext: { probabilities: true; options: { temperature: 0 } } }]
          )
          try {
            const outputs = await sequence.controlledEvaluate(items)
            let sum = 0
            tokens.forEach((token, i) => {
              const p = outputs[i]?.next?.probabilities?.get(token) ?? 0
              sum += Math.log(p)
            })
            return sum
          } finally {
            await sequence.eraseContextTokenRanges([{ start: context.length, end: sequence.nextTokenIndex }])
          }
        }
        /** Prompt tokens in the sequence; undefined until the cached prefix was adapted (first step). */
        let prefilled: number | undefined
        let finished = false
        // One step per chunk: the first also trims the cache, the last also scores the labels (a
        // prompt of one chunk is one step, as before chunking).
        const advance = step("score", async (): Promise<ScoreEvent> => {
          if (prefilled === undefined) {
            await sequence.adaptStateToTokens(wholeChunksCached(sequence.contextTokens, context, chunk), false)
            prefilled = sequence.nextTokenIndex
          }
          if (prefilled < context.length) {
            const end = Math.min((Math.floor(prefilled / chunk) + 1) * chunk, context.length)
            await sequence.evaluateWithoutGeneratingNewTokens(context.slice(prefilled, end))
            prefilled = end
            if (prefilled < context.length) return { _tag: "Prefilled", done: prefilled, total: context.length }
          }
          const logLikelihoods = new Map<string, number>()
          for (const [label, tokens] of labelTokens) logLikelihoods.set(label, await labelLogLikelihood(tokens))
          finished = true
          return { _tag: "Scored", heads: heads.map((head) => headScore(head, labelTokens, logLikelihoods)) }
        }, "decision")
        return Stream.repeatEffectOption(
          Effect.suspend(() => (finished ? Effect.fail(Option.none()) : Effect.mapError(advance, Option.some)))
        )
      }))

    return { score }
  })
