/**
 * Generations on the generation model's sequences, as a state machine driven by the host: Begin
 * claims an idle sequence and reckons the longest cached prefix of the prompt to keep, without
 * waiting for the engine (the first step trims the sequence to it); each Advance step is
 * prefill chunks (a native batch's worth, fewer when another step waits or the generation is
 * cancelled: a cancel lands after the chunk in flight) or one decoded token (so
 * a cancel lands at the next step and other lanes run between steps); End releases the sequence. What a generation produced stays with it, so an
 * Advance can replay from any index the host did not receive. A generation whose model is unloaded
 * is forgotten; every generation still open is ended when the engine's scope closes.
 */
import * as Chunk from "effect/Chunk"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as FiberId from "effect/FiberId"
import * as Mailbox from "effect/Mailbox"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import type { LlamaContextSequence, LlamaModel, Token } from "node-llama-cpp"
import type { TokenCandidate } from "../../domain/Inference.js"
import { MAX_TOP_PROBABILITIES } from "../../domain/RequestRules.js"
import {
  EngineFailure,
  type EngineError,
  type InvalidEngineRequest,
  type RoleNotLoaded,
  UnknownGeneration
} from "../../domain/EngineError.js"
import type { Failpoints } from "../Failpoints.js"
import type { GenerationEvent } from "../../domain/Generation.js"
import {
  type AdvanceEvent,
  type BeginRequest,
  DECODE_MESSAGE_INTERVAL_MS,
  DECODE_MESSAGE_TOKENS,
  DECODE_RUN_AHEAD,
  type EngineStopReason,
  type Lane,
  type Sampling
} from "../Protocol.js"
import { checkPositiveInt, checkPromptTokens, invalid } from "./Checks.js"
import { afterDecodedToken, type FaultHooks } from "./Faults.js"
import * as Grammars from "./Grammars.js"
import type { Native } from "./Llama.js"
import { type ColdSplit, keptOnGrid } from "./PrefixReuse.js"
import type { Residents } from "./Residents.js"

export interface Generations {
  /** Registers a generation on an idle sequence; answers how many prompt tokens its cache already held. */
  readonly begin: (request: BeginRequest) => Effect.Effect<{ readonly reusedTokens: number }, EngineError>
  /**
   * Begin, then Advance from the start, as one stream: Started (the reused prompt tokens) leaves
   * in the first message, with the first step. A Begin that fails fails the stream with its error.
   */
  readonly start: (request: BeginRequest) => Stream.Stream<GenerationEvent, EngineError>
  /**
   * Streams the generation's steps from `fromIndex`: first what was already produced past that
   * index (the host may have missed it when it paused), then new steps until it finishes.
   */
  readonly advance: (generationId: string, fromIndex: number) => Stream.Stream<AdvanceEvent, EngineError>
  /** Forgets the generation and closes its evaluation; an End before its Begin keeps that Begin from registering. */
  readonly end: (generationId: string) => Effect.Effect<void>
  /**
   * `end`, forgetting the generation at once, when called (the returned effect closes its
   * evaluation): the child's End handler, which the protocol calls in the order the messages came,
   * so a Begin sent after an End finds its sequence idle.
   */
  readonly endNow: (generationId: string) => Effect.Effect<void>
  /** A generation sequence that no generation is using. */
  readonly idleSequence: (index: number) => Effect.Effect<LlamaContextSequence, InvalidEngineRequest | RoleNotLoaded>
  /** Forgets how a sequence's cache was split (its state is replaced other than by a prefill). */
  readonly forgetSplit: (sequence: LlamaContextSequence) => void
}

interface Generation {
  readonly id: string
  readonly sequenceIndex: number
  readonly sequence: LlamaContextSequence
  readonly model: LlamaModel
  readonly prompt: ReadonlyArray<Token>
  readonly sampling: Sampling
  readonly maxTokens: number
  readonly stopTokens: ReadonlySet<number>
  readonly prefillChunk: number
  /** Began at a multiple of the chunk size: prefill calls end on the grid, as a cold run's do. */
  readonly onGrid: boolean
  readonly lane: Lane
  /** Prefill the whole prompt and finish without sampling. */
  readonly prefillOnly: boolean
  /** Its prefill is split as a cold run splits it (what was kept ends on the grid, or is a cold split itself). */
  readonly coldSplit: boolean
  /** Sampling under a grammar: its evaluation state (this generation's own) and the banned special tokens. */
  readonly constraint: Grammars.Constraint | undefined
  /** Prompt tokens (all but the last, unless prefill-only) in the sequence's KV cache. */
  prefilled: number
  /** The cached prefix to trim the sequence to, until the first step has done so. */
  keep: Array<Token> | undefined
  iterator:
    | AsyncGenerator<
      { readonly token: Token; readonly confidence?: number; readonly probabilities?: Map<Token, number> },
      void,
      void | Token | Token[]
    >
    | undefined
  /** Report each sampled token's probability (after sampling options). */
  readonly confidence: boolean
  readonly confidences: Array<number>
  /** How many of the most probable tokens to report per step (0: none). */
  readonly topProbabilities: number
  /** Per token, the most probable tokens at its step (only when asked for). */
  readonly candidates: Array<ReadonlyArray<TokenCandidate>>
  readonly tokens: Array<number>
  readonly texts: Array<string>
  /** Tokens whose text is held back until their UTF-8 sequence completes. */
  pendingText: Array<number>
  finished: EngineStopReason | undefined
}

/** How many ended-before-begun generation ids the engine remembers. */
const MAX_ENDED = 4096

/** Text for a newly sampled token; held back while it ends in an incomplete UTF-8 sequence. */
const textOf = (g: Generation, token: number): string => {
  g.pendingText.push(token)
  // Held-back tokens are already in g.tokens (the new one is not yet): the context ends before them.
  const end = g.tokens.length - (g.pendingText.length - 1)
  const context = g.tokens.slice(Math.max(0, end - 8), end) as Array<Token>
  const text = g.model.detokenize(g.pendingText as Array<Token>, false, context)
  if (text.endsWith("\uFFFD") && g.pendingText.length < 4) return ""
  g.pendingText = []
  return text
}

/**
 * The `count` most probable tokens of the step that produced the last generated token (the map is
 * sorted most probable first), each with its own text after the tokens before it (special tokens
 * as their text).
 */
const topCandidates = (g: Generation, probabilities: ReadonlyMap<Token, number>, count: number): ReadonlyArray<TokenCandidate> => {
  const context = g.tokens.slice(-9, -1) as Array<Token>
  const candidates: Array<TokenCandidate> = []
  for (const [token, probability] of probabilities) {
    if (candidates.length >= count) break
    candidates.push({ token, text: g.model.detokenize([token], true, context), probability })
  }
  return candidates
}

/** A Token event, with its probability and candidates when they were asked for. */
const tokenEvent = (
  index: number,
  token: number,
  text: string,
  confidence: number | undefined,
  candidates: ReadonlyArray<TokenCandidate> | undefined
): AdvanceEvent =>
  confidence === undefined
    ? { _tag: "Token", index, token, text }
    : candidates === undefined
    ? { _tag: "Token", index, token, text, confidence }
    : { _tag: "Token", index, token, text, confidence, candidates }

/** Top probabilities: an integer in [0, MAX_TOP_PROBABILITIES], above 0 only with confidence. */
const checkTopProbabilities = (request: BeginRequest) => {
  const n = request.topProbabilities ?? 0
  if (!Number.isInteger(n) || n < 0 || n > MAX_TOP_PROBABILITIES) {
    return Effect.fail(invalid("topProbabilities", n, `must be an integer from 0 to ${MAX_TOP_PROBABILITIES}`))
  }
  if (n > 0 && request.confidence !== true) {
    return Effect.fail(invalid("topProbabilities", n, "needs confidence (each sampled token's probability)"))
  }
  return Effect.succeed(n)
}

/** Where prefill stops: before the last prompt token (it is evaluated to sample), or at the end. */
const prefillEnd = (g: Generation) => (g.prefillOnly ? g.prompt.length : g.prompt.length - 1)

export const make = (
  native: Native,
  residents: Residents,
  faults: FaultHooks | undefined
): Effect.Effect<Generations, never, Scope.Scope> =>
  Effect.gen(function*() {
    const { contended, decodeStep, options, step, stoppableStep } = native
    const grammars = Grammars.make(native.llama)
    const failpoints: Failpoints | undefined = faults?.failpoints
    const decoded = afterDecodedToken(faults)
    let decodedTokens = 0
    const generations = new Map<string, Generation>()
    /** Per sequence, where its cached prefill ended when it was split as a cold run splits it. */
    const coldSplits = new Map<LlamaContextSequence, ColdSplit>()
    /** Records a generation's finished prefill as the sequence's cold split, when it is one. */
    const prefillDone = (g: Generation) => {
      if (g.coldSplit && g.prefilled >= prefillEnd(g)) coldSplits.set(g.sequence, { end: prefillEnd(g), chunk: g.prefillChunk })
    }
    /** Generation ids ended before they began (bounded; oldest forgotten first). */
    const ended = new Set<string>()
    /** Per sequence, the close of the evaluation of a generation ended on it and not yet closed. */
    const closing = new Map<LlamaContextSequence, Deferred.Deferred<void>>()

    residents.onUnload((r) => {
      for (const [id, g] of generations) if (r.sequences.includes(g.sequence)) generations.delete(id)
      for (const sequence of r.sequences) coldSplits.delete(sequence)
    })

    const idleSequence = (index: number) =>
      Effect.gen(function*() {
        const r = yield* residents.resident("generation")
        const sequence = r.sequences[index]
        if (!Number.isInteger(index) || sequence === undefined) {
          return yield* Effect.fail(invalid("sequence", index, `must be an integer in [0, ${r.sequences.length})`))
        }
        for (const g of generations.values()) {
          if (g.sequence === sequence) return yield* Effect.fail(invalid("sequence", index, `busy with generation ${g.id}`))
        }
        // The evaluation of a generation that ended on it holds the sequence until it is closed.
        const previous = closing.get(sequence)
        if (previous !== undefined) yield* Deferred.await(previous)
        return sequence
      })

    const begin = (request: BeginRequest) =>
      Effect.gen(function*() {
        const { lane = "foreground", sequence: sequenceIndex = 0, stopTokens = [] } = request
        const r = yield* residents.resident("generation")
        if (generations.has(request.generationId)) {
          return yield* Effect.fail(invalid("generationId", request.generationId, "already begun"))
        }
        if (request.prompt.length === 0) return yield* Effect.fail(invalid("prompt", [], "must not be empty"))
        yield* checkPositiveInt("maxTokens", request.maxTokens)
        yield* checkPositiveInt("prefillChunk", request.prefillChunk)
        const topProbabilities = yield* checkTopProbabilities(request)
        const sequence = yield* idleSequence(sequenceIndex)
        yield* checkPromptTokens(request.prompt, r.vocabularySize)
        const constraint = request.jsonSchema === undefined || request.prefillOnly === true
          ? undefined
          : yield* grammars.constraint(r.model, request.jsonSchema)
        const needed = request.prompt.length + request.maxTokens
        if (needed > r.context.contextSize) {
          return yield* Effect.fail(
            invalid("maxTokens", request.maxTokens, `prompt ${request.prompt.length} + max tokens exceeds context ${r.context.contextSize}`)
          )
        }
        // Keep the longest cached prefix of the prompt (never the last token: it is evaluated to
        // sample; prefill-only keeps all of it). On the grid, only whole prefill chunks are kept, or
        // the whole prefill when the cache holds it split exactly as a cold run splits it (a repeated
        // prompt), so the rest is split into the same batches as a cold run (bit-identical probabilities).
        const prefillChunk = Math.min(request.prefillChunk, options.batchSize)
        const candidates = (request.prefillOnly === true ? request.prompt : request.prompt.slice(0, -1)) as Array<Token>
        const split = coldSplits.get(sequence)
        // The sequence's cache changes from here: its split is recorded again when this prefill ends.
        coldSplits.delete(sequence)
        const keep = request.reuseOnGrid === true
          ? keptOnGrid(sequence.contextTokens, candidates, prefillChunk, split)
          : candidates
        // What the sequence keeps of `keep` (its common prefix with the cache). Trimming the rest is
        // a native call, left to the generation's first step: Begin itself never waits for the
        // engine, so a request's first step is its only wait at the step gate.
        const reused = sequence.compareContextTokens(keep).firstDifferentIndex
        // The host ended it while this Begin was on its way (its caller was interrupted): never register it.
        if (ended.delete(request.generationId)) {
          return yield* Effect.fail(invalid("generationId", request.generationId, "was ended before it began"))
        }
        const g: Generation = {
          id: request.generationId,
          sequenceIndex,
          sequence,
          model: r.model,
          prompt: request.prompt as Array<Token>,
          sampling: request.sampling,
          maxTokens: request.maxTokens,
          stopTokens: new Set(stopTokens),
          prefillChunk,
          onGrid: reused % prefillChunk === 0,
          lane,
          prefillOnly: request.prefillOnly === true,
          coldSplit: request.reuseOnGrid === true || reused === 0,
          constraint,
          prefilled: reused,
          keep,
          iterator: undefined,
          confidence: request.confidence === true,
          confidences: [],
          topProbabilities,
          candidates: [],
          tokens: [],
          texts: [],
          pendingText: [],
          finished: undefined
        }
        generations.set(request.generationId, g)
        // A prompt whose whole prefill was kept is prefilled already.
        prefillDone(g)
        return { reusedTokens: reused }
      })

    const generation = (generationId: string) =>
      Effect.suspend(() => {
        const g = generations.get(generationId)
        return g === undefined ? Effect.fail(new UnknownGeneration({ generationId })) : Effect.succeed(g)
      })

    /**
     * Trims the sequence to the generation's kept prefix (in its first step). Should the engine keep
     * less than Begin reckoned (a cache it had to drop), the prompt is prefilled from there.
     */
    const trim = async (g: Generation) => {
      const keep = g.keep
      if (keep === undefined) return
      g.keep = undefined
      await g.sequence.adaptStateToTokens(keep, false)
      g.prefilled = Math.min(g.prefilled, g.sequence.nextTokenIndex)
    }

    /**
     * Where the native prefill call that starts at `at` ends. On the grid (the generation began at
     * a multiple of the chunk size: a cold run, or reuse of whole chunks), at the next multiple, so
     * the prompt splits into the same batches as a cold run. Off the grid (a continuation: its cache
     * ends wherever the last turn's output did, so no cold run splits like it), a chunk further,
     * and a rest shorter than a chunk joins the call before it: fewer native calls, none longer than
     * two chunks (or the native batch).
     */
    const callEnd = (g: Generation, at: number, last: number) => {
      if (g.onGrid) return Math.min(last, Math.floor(at / g.prefillChunk) * g.prefillChunk + g.prefillChunk)
      const end = at + g.prefillChunk
      return last - end < g.prefillChunk && last - at <= options.batchSize ? last : Math.min(last, end)
    }

    /** One step: prefill chunks (one native call each) or one decoded token. */
    const advanceOnce = (g: Generation): Effect.Effect<AdvanceEvent, EngineError> => {
      const last = prefillEnd(g)
      if (g.prefilled < last) {
        // One step runs call after call (each its own native call, so the split is callEnd's) up
        // to a native batch's worth of tokens (on the grid, to a grid point), and ends after the
        // call in flight when a step of its lane or a higher one waits (a decision still runs
        // after at most one call) or when the generation is cancelled (its caller interrupted, or
        // an End that forgot it arrived first).
        const onGrid = (at: number) => Math.floor(at / g.prefillChunk) * g.prefillChunk
        return Effect.map(
          stoppableStep("prefill", async (stop) => {
            await trim(g)
            const stepEnd = g.onGrid
              ? Math.min(last, Math.max(onGrid(g.prefilled) + g.prefillChunk, onGrid(g.prefilled + options.batchSize)))
              : Math.min(last, g.prefilled + options.batchSize)
            do {
              const end = callEnd(g, g.prefilled, last)
              if (failpoints?.slowPrefillCallMs !== undefined) await new Promise((resume) => setTimeout(resume, failpoints.slowPrefillCallMs))
              await g.sequence.evaluateWithoutGeneratingNewTokens(g.prompt.slice(g.prefilled, end) as Array<Token>)
              g.prefilled = end
            } while (g.prefilled < stepEnd && !stop.requested && generations.get(g.id) === g && !contended(g.lane))
            prefillDone(g)
          }, g.lane),
          // Read after the step: the tokens prefilled so far, this chunk included.
          () => ({ _tag: "Prefilled", done: g.prefilled, total: g.prompt.length }) as const
        )
      }
      return Effect.map(
        decodeStep("decode", async () => {
          if (failpoints?.hangAtStep !== undefined && decodedTokens + 1 >= failpoints.hangAtStep) {
            await new Promise<never>(() => {})
          }
          if (g.keep !== undefined) {
            await trim(g)
            // Only where the engine kept less than Begin reckoned (see `trim`).
            if (g.prefilled < last) {
              await g.sequence.evaluateWithoutGeneratingNewTokens(g.prompt.slice(g.prefilled, last) as Array<Token>)
              g.prefilled = last
            }
          }
          g.iterator ??= g.sequence.evaluateWithMetadata([g.prompt[last]!], {
            confidence: g.confidence,
            probabilities: g.topProbabilities > 0
          }, {
            yieldEogToken: true,
            temperature: g.sampling.temperature,
            ...(g.sampling.topK !== undefined ? { topK: g.sampling.topK } : {}),
            ...(g.sampling.topP !== undefined ? { topP: g.sampling.topP } : {}),
            ...(g.sampling.seed !== undefined ? { seed: g.sampling.seed } : {}),
            ...g.constraint
          })
          const next = await g.iterator.next()
          if (next.done === true) throw new Error("the sequence ended its evaluation")
          const token = next.value.token as number
          if (g.model.isEogToken(next.value.token)) {
            g.finished = "endOfGeneration"
            return { _tag: "Finished", reason: g.finished, generated: g.tokens.length } as const
          }
          if (g.stopTokens.has(token)) {
            g.finished = "stopToken"
            return { _tag: "Finished", reason: g.finished, generated: g.tokens.length } as const
          }
          const text = textOf(g, token)
          g.tokens.push(token)
          g.texts.push(text)
          const confidence = next.value.confidence
          if (confidence !== undefined) g.confidences.push(confidence)
          let candidates: ReadonlyArray<TokenCandidate> | undefined
          if (g.topProbabilities > 0) {
            candidates = topCandidates(g, next.value.probabilities ?? new Map(), g.topProbabilities)
            g.candidates.push(candidates)
          }
          if (g.tokens.length >= g.maxTokens) g.finished = "maxTokens"
          decoded(++decodedTokens)
          return tokenEvent(g.tokens.length - 1, token, text, confidence, candidates)
        }, g.lane),
        (event): AdvanceEvent => event
      )
    }

    const advance = (generationId: string, fromIndex: number): Stream.Stream<AdvanceEvent, EngineError> =>
      Stream.unwrap(
        Effect.gen(function*() {
          const g = yield* generation(generationId)
          if (!Number.isInteger(fromIndex) || fromIndex < 0 || fromIndex > g.tokens.length) {
            return yield* Effect.fail(invalid("fromIndex", fromIndex, `must be in [0, ${g.tokens.length}]`))
          }
          const replay = g.tokens.slice(fromIndex).map((token, i): AdvanceEvent => {
            const index = fromIndex + i
            return tokenEvent(index, token, g.texts[index]!, g.confidences[index], g.candidates[index])
          })
          const prefill = Stream.repeatEffectOption(
            Effect.suspend(() =>
              g.prefilled < prefillEnd(g) ? Effect.mapError(advanceOnce(g), Option.some) : Effect.fail(Option.none())
            )
          )
          // Decode runs ahead of the host's acknowledgements, so the socket round trip overlaps the
          // next steps instead of adding to them: each step holds one of DECODE_RUN_AHEAD + 1
          // permits until the host acknowledged the message that carried it (the RPC server pulls
          // again only after the ack). Tokens leave in messages of several (each message costs
          // every process on the way the same CPU whatever it carries): a message leaves at once
          // when none left in the last DECODE_MESSAGE_INTERVAL_MS (the first token, a slow model),
          // else when DECODE_MESSAGE_TOKENS are ready, the generation ended or that interval has
          // passed. A host that is behind takes every step ready in one message.
          const decode = Stream.unwrapScoped(Effect.gen(function*() {
            const ready = yield* Mailbox.make<AdvanceEvent, EngineError>()
            const permits = yield* Effect.makeSemaphore(DECODE_RUN_AHEAD + 1)
            /** Steps decoded and not yet taken for a message. */
            let unsent = 0
            /** Set while a pull waits to fill its message; completed when the message should leave. */
            let filled: Deferred.Deferred<void> | undefined
            const leave = () => {
              if (filled === undefined) return
              Deferred.unsafeDone(filled, Exit.void)
              filled = undefined
            }
            /** Offers steps together: a message never splits them. */
            const offer = (...events: ReadonlyArray<AdvanceEvent>) =>
              Effect.sync(() => {
                for (const event of events) ready.unsafeOffer(event)
                unsent += events.length
                if (unsent >= DECODE_MESSAGE_TOKENS || events[events.length - 1]!._tag === "Finished") leave()
              })
            const finished = (reason: EngineStopReason): AdvanceEvent => ({ _tag: "Finished", reason, generated: g.tokens.length })
            const next: Effect.Effect<void, EngineError> = Effect.suspend(() => {
              if (g.prefillOnly) g.finished ??= "maxTokens"
              if (g.finished !== undefined) return Effect.zipRight(permits.take(1), offer(finished(g.finished)))
              return Effect.zipRight(
                permits.take(1),
                Effect.flatMap(advanceOnce(g), (event) =>
                  event._tag === "Finished"
                    ? offer(event)
                    // The token that reached the limit leaves with Finished, in one message.
                    : g.finished !== undefined
                    ? offer(event, finished(g.finished))
                    : Effect.zipRight(offer(event), next))
              )
            })
            // A failure ends the mailbox: the waiting message leaves with what it has, the failure after it.
            yield* next.pipe(Mailbox.into(ready), Effect.ensuring(Effect.sync(leave)), Effect.forkScoped)
            /** Steps handed to the host in the last pull: acknowledged by the time of the next. */
            let unacknowledged = 0
            /** When the last message left (ms, monotonic). */
            let lastSent = Number.NEGATIVE_INFINITY
            /** Waits until the message should leave: enough steps, the end, or the interval since the last. */
            const fill = (events: Chunk.Chunk<AdvanceEvent>, done: boolean): Effect.Effect<void> => {
              const wait = lastSent + DECODE_MESSAGE_INTERVAL_MS - performance.now()
              if (done || wait <= 0 || unsent >= DECODE_MESSAGE_TOKENS || Chunk.unsafeLast(events)._tag === "Finished") {
                return Effect.void
              }
              const signal = Deferred.unsafeMake<void>(FiberId.none)
              filled = signal
              return Effect.ensuring(
                Effect.raceFirst(Deferred.await(signal), Effect.sleep(wait)),
                Effect.sync(() => {
                  if (filled === signal) filled = undefined
                })
              )
            }
            const take = Effect.flatMap(ready.takeAll, ([first, firstDone]) =>
              Effect.flatMap(fill(first, firstDone), (): Effect.Effect<readonly [Chunk.Chunk<AdvanceEvent>, boolean], EngineError> =>
                // Only when steps are waiting, so it never fails here: a mailbox that failed holds its
                // steps before its failure, which the next pull gets.
                Option.getOrElse(ready.unsafeSize(), () => 0) > 0
                  ? Effect.map(ready.takeAll, ([more, done]) => [Chunk.appendAll(first, more), done] as const)
                  : Effect.succeed([first, firstDone] as const)))
            return Stream.repeatEffectChunkOption(
              Effect.zipRight(
                Effect.suspend(() => permits.release(unacknowledged)),
                Effect.flatMap(Effect.mapError(take, Option.some), ([events, done]) => {
                  unacknowledged = Chunk.size(events)
                  unsent -= Chunk.size(events)
                  lastSent = performance.now()
                  return Chunk.isEmpty(events) && done ? Effect.fail(Option.none()) : Effect.succeed(events)
                })
              )
            )
          }))
          // Prefill chunks go one at a time (each is long; a cancel lands at the next chunk).
          return Stream.fromIterable(replay).pipe(Stream.concat(prefill), Stream.concat(decode))
        })
      )

    const start = (request: BeginRequest): Stream.Stream<GenerationEvent, EngineError> =>
      Stream.unwrap(Effect.map(
        // A defect answers as the child's handlers answer one: a typed EngineFailure.
        Effect.catchAllDefect(begin(request), (defect) =>
          Effect.fail(new EngineFailure({ operation: "begin", reason: defect instanceof Error ? defect.message : String(defect) }))),
        ({ reusedTokens }) => {
          // Started joins the first step's message: a message of its own would wait for its
          // acknowledgement before the first step is taken.
          let started = false
          return Stream.mapChunks(advance(request.generationId, 0), (events): Chunk.Chunk<GenerationEvent> => {
            if (started) return events
            started = true
            return Chunk.prepend(events, { _tag: "Started", reusedTokens })
          })
        }
      ))

    /**
     * Forgets the generation at once, when called; closing its evaluation is the returned effect,
     * and a Begin on its sequence waits for that close (the evaluation holds the sequence's lock
     * until then).
     */
    const endNow = (generationId: string): Effect.Effect<void> => {
      const g = generations.get(generationId)
      if (g === undefined) {
        // An End may overtake its Begin (the host stops waiting for a Begin it was interrupted in):
        // remember it, so that Begin does not register a generation nobody will end.
        ended.add(generationId)
        if (ended.size > MAX_ENDED) ended.delete(ended.values().next().value!)
        return Effect.void
      }
      generations.delete(generationId)
      const iterator = g.iterator
      if (iterator === undefined && g.keep === undefined) return Effect.void
      const closed = Deferred.unsafeMake<void>(FiberId.none)
      closing.set(g.sequence, closed)
      // Ended before its first step, it still trims the sequence to what it reported kept.
      return Effect.ignore(step("end", async () => {
        await trim(g)
        await iterator?.return()
      })).pipe(
        Effect.ensuring(Effect.sync(() => {
          if (closing.get(g.sequence) === closed) closing.delete(g.sequence)
          Deferred.unsafeDone(closed, Exit.void)
        }))
      )
    }

    const end = (generationId: string) => Effect.suspend(() => endNow(generationId))

    yield* Effect.addFinalizer(() => Effect.forEach(Array.from(generations.keys()), end, { discard: true }))

    return { begin, start, advance, end, endNow, idleSequence, forgetSplit: (sequence) => void coldSplits.delete(sequence) }
  })
