/**
 * Provider: the public Effect API of the runtime. Embedders, the RPC server and the command line
 * call only this. `generate` streams channel-tagged text and ends with usage, timings, the stop
 * reason and a checkpoint (without maxTokens it runs until the model stops or the context is
 * full); `decide` scores labels on the decision model; `count` gives exact token counts through
 * the chat template and `tokenize` the tokens themselves; `prepare` prefills a conversation's
 * expected prompt while the engine is idle; `readiness` reports the engine, the device budget and
 * the admitted contexts. Whatever waits for the engine before a request is queued (rendering and
 * tokenizing its prompt) counts against its queue timeout (Scheduler.beforeQueue).
 */
import * as Chunk from "effect/Chunk"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Stream from "effect/Stream"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import { identity } from "effect/Function"
import * as FiberMap from "effect/FiberMap"
import * as Crypto from "node:crypto"
import * as Path from "node:path"
import type {
  CountRequest,
  CountResult,
  DecideRequest,
  DecideResult,
  GenerateChunk,
  GenerateRequest,
  PrepareRequest,
  PrepareResult,
  Readiness,
  ReuseKind,
  StopReason,
  TokenizeRequest,
  TokenizeResult
} from "../domain/Inference.js"
import { Admission } from "./Admission.js"
import type { TemplateInputs } from "../native/Protocol.js"
import type { OpenChannel } from "./ChannelDecoder.js"
import { type GenerationEvent, NativeWorker, type WorkerReadiness } from "./NativeWorker.js"
import { Conversations } from "./Conversations.js"
import { InvalidCheckpoint, type ProviderError } from "./ProviderError.js"
import * as Continuation from "../domain/Continuation.js"
import { outputState } from "./provider/Output.js"
import * as RecentGenerations from "./provider/RecentGenerations.js"
import { ValidCountRequest, ValidDecideRequest, ValidGenerateRequest, ValidPrepareRequest } from "../domain/RequestRules.js"
import { checkLabelTokens, invalid, jsonSchemaOf, validate } from "./provider/Validation.js"
import { ProviderConfig } from "./provider/ProviderConfig.js"
import { Scheduler } from "./Scheduler.js"

export { ProviderConfig, type ProviderConfigShape } from "./provider/ProviderConfig.js"

export class Provider extends Context.Tag("nativegen/Provider")<Provider, {
  /** Streams a generation: Text chunks (per channel), then one Done chunk. Interrupt to cancel. */
  readonly generate: (request: GenerateRequest) => Stream.Stream<GenerateChunk, ProviderError>
  /** Per head, each label's probability and rank, from the decision model. */
  readonly decide: (request: DecideRequest) => Effect.Effect<DecideResult, ProviderError>
  /** Exact token count through the role model's chat template. */
  readonly count: (request: CountRequest) => Effect.Effect<CountResult, ProviderError>
  /** The exact token ids of messages (through the role model's chat template) or of plain text. */
  readonly tokenize: (request: TokenizeRequest) => Effect.Effect<TokenizeResult, ProviderError>
  /** Prefills a conversation's expected prompt in the preparation lane. */
  readonly prepare: (request: PrepareRequest) => Effect.Effect<PrepareResult, ProviderError>
  readonly readiness: Effect.Effect<Readiness>
  /** Readiness whenever the engine state changes (the current one first). */
  readonly readinessChanges: Stream.Stream<Readiness>
}>() {}

const validateGenerate = validate(ValidGenerateRequest)
const validateDecide = validate(ValidDecideRequest)
const validateCount = validate(ValidCountRequest)
const validatePrepare = validate(ValidPrepareRequest)

/** What the chat template reads beside the messages. */
const templateInputsOf = (request: GenerateRequest): TemplateInputs => ({
  ...(request.tools === undefined ? {} : { tools: request.tools }),
  ...(request.thinking === undefined ? {} : { thinking: request.thinking })
})

/** The conversation a request belongs to: its id, or its checkpoint's. */
const conversationOf = (request: GenerateRequest) => request.conversation ?? request.checkpoint?.conversation

export const make = Effect.gen(function*() {
  const { prefillChunk } = yield* ProviderConfig
  const worker = yield* NativeWorker
  const admission = yield* Admission
  const scheduler = yield* Scheduler
  const conversations = yield* Conversations
  /** Preparations running per conversation; a turn of that conversation preempts its preparation. */
  const preparing = yield* FiberMap.make<string, void, ProviderError>()
  /** Conversations whose slot was last filled by a preparation. */
  const prepared = new Set<string>()
  const recent = RecentGenerations.make()

  /**
   * Makes room for a turn of `conversation`: its own preparation is interrupted, and when no
   * conversation slot is idle, so are all others (preparation runs only while nothing else
   * waits). What a preparation prefilled stays in its slot and is recorded.
   */
  const preempt = (conversation: string | undefined) =>
    Effect.gen(function*() {
      if (conversation === undefined) return
      const { idleConversationSlots } = yield* scheduler.status
      yield* idleConversationSlots > 0 ? stopPreparing(conversation) : FiberMap.clear(preparing)
    })

  /** Interrupts the conversation's own preparation, if one runs. */
  const stopPreparing = (conversation: string) => FiberMap.remove(preparing, conversation)

  /**
   * The prompt of a turn: a plain-text prompt tokenized as it stands (its special-token texts read
   * as those tokens, no template); with a checkpoint, the held tokens it proves, then the
   * template's close of the assistant turn and the new turn (only those are new); otherwise the
   * whole chat rendered.
   */
  const promptOf = (request: GenerateRequest) =>
    Effect.gen(function*() {
      if (request.prompt !== undefined) {
        return { tokens: yield* worker.tokenize("generation", request.prompt, true), continued: false }
      }
      const conversation = conversationOf(request)
      const checkpoint = request.checkpoint
      const inputs = templateInputsOf(request)
      // With a response format the grammar covers the whole output: the new turn skips thinking.
      const turnInputs: TemplateInputs = request.responseFormat === undefined ? inputs : { ...inputs, thinking: false }
      if (checkpoint === undefined || conversation === undefined) {
        return { tokens: yield* worker.render("generation", request.messages, true, turnInputs), continued: false }
      }
      if (request.conversation !== undefined && checkpoint.conversation !== request.conversation) {
        return yield* new InvalidCheckpoint({
          conversation: request.conversation,
          reason: `the checkpoint belongs to conversation ${checkpoint.conversation}`
        })
      }
      const { tokens } = yield* conversations.verify(checkpoint)
      const split = Continuation.splitTurn(request.messages)
      if (split.turn.length === 0) return yield* invalid("messages", request.messages.length, "a continued turn needs a message after the last assistant message")
      const history = split.history.length >= 2 ? split.history : Continuation.standInHistory
      // One request: the child renders the chat (three times, and a probe where needed) and
      // tokenizes what is new; neither the texts nor a second round trip cross the boundary.
      const added = yield* worker.renderContinuation("generation", history, split.turn, inputs, turnInputs)
      if ("refused" in added) return yield* invalid("messages", conversation, added.refused)
      return { tokens: [...tokens, ...added.tokens], continued: true }
    })

  /** The generation model's channel markers, as the engine reports them for the loaded model. */
  const specialTokensOf = (ready: WorkerReadiness) =>
    ready.models.find((m) => m.role === "generation")?.specialTokens ??
      { thinkOpen: null, thinkClose: null, toolOpen: null, toolClose: null }

  /**
   * The output budget of a request that gives none: what the admitted generation context leaves
   * after the prompt, and at least one token (so a prompt that fills the context alone is refused
   * with the numbers: its tokens, one output token, the context).
   */
  const restOfContext = (promptTokens: number) =>
    Effect.map(admission.contextOf("generation"), (context) => Math.max(1, context - promptTokens))

  const generate = (request: GenerateRequest): Stream.Stream<GenerateChunk, ProviderError> =>
    Stream.unwrapScoped(
      Effect.gen(function*() {
        const clock = yield* Effect.clock
        const submitted = clock.unsafeCurrentTimeMillis()
        yield* validateGenerate(request)
        const jsonSchema = request.responseFormat === undefined ? undefined : yield* jsonSchemaOf(request.responseFormat)
        const conversation = conversationOf(request)
        const lane = request.lane ?? "foreground"
        // Rendering waits for a ready engine: it counts against the request's queue timeout.
        const { continued, tokens: prompt } = yield* scheduler.beforeQueue(lane, submitted, promptOf(request))
        const maxTokens = request.maxTokens ?? (yield* restOfContext(prompt.length))
        yield* admission.checkTokens("generation", prompt.length, maxTokens)
        const label = `generate-${Crypto.randomUUID().slice(0, 8)}`
        yield* preempt(conversation)
        const grant = yield* scheduler.generation({ lane, label, conversation, submittedAt: submitted })
        const attached = conversation === undefined ? "absent" : yield* conversations.attach(conversation, grant.slot, grant.evicted)
        const wasPrepared = conversation !== undefined && prepared.delete(conversation)
        const generatedTokens: Array<number> = []
        const topProbabilities = request.topProbabilities ?? 0
        const output = outputState(
          specialTokensOf(yield* worker.readiness),
          request.stop ?? [],
          (n) => `${label}-call-${n}`,
          { probabilities: request.probabilities === true, candidates: topProbabilities > 0 }
        )
        let reused = 0
        let firstStepAt: number | undefined
        let firstTokenAt: number | undefined
        let lastTokenAt: number | undefined
        let stopReason: StopReason = "maxTokens"
        let truncatedChannel: OpenChannel | null = null
        /** Set by the event that ends the output (a stop string or the engine's Finished). */
        let ended = false
        /** The chunks of that event (the last the stream passes on). */
        let endGroup: ReadonlyArray<GenerateChunk> | undefined
        /** A failure found in the middle of a message: raised after the chunks before it. */
        let failedAfter: { readonly error: ProviderError; readonly group: ReadonlyArray<GenerateChunk> } | undefined

        /** What one engine event adds to the output. */
        const onEvent = (event: GenerationEvent, now: number): Either.Either<ReadonlyArray<GenerateChunk>, ProviderError> => {
          switch (event._tag) {
            case "Started":
              reused = event.reusedTokens
              return Either.right([])
            case "Prefilled":
              return Either.right([])
            case "Token": {
              generatedTokens.push(event.token)
              firstTokenAt ??= now
              lastTokenAt = now
              return Either.map(output.token(event.token, event.text, event.confidence, event.candidates), ({ chunks, stopped }) => {
                if (stopped) {
                  stopReason = "stopString"
                  ended = true
                }
                return chunks
              })
            }
            case "Finished":
              return Either.map(output.finish(event.reason === "maxTokens"), (end) => {
                truncatedChannel = end.truncated
                stopReason = event.reason === "maxTokens" ? "maxTokens" : output.calledTools() ? "toolCalls" : "endOfGeneration"
                ended = true
                return end.chunks
              })
          }
        }

        /** The Done chunk, recorded among the recent generations. */
        const finish = Effect.gen(function*() {
          const now = yield* Clock.currentTimeMillis
          const checkpoint = conversation === undefined
            ? undefined
            : yield* conversations.record(conversation, grant.slot, [...prompt, ...generatedTokens])
          const reuse: ReuseKind = reused === 0
            ? "cold"
            : attached === "restored"
            ? "restored"
            : attached === "absent"
            ? "prefix"
            : continued
            ? "continuation"
            : wasPrepared
            ? "prepared"
            : "prefix"
          const generated = generatedTokens.length
          const decodeMillis = firstTokenAt !== undefined && lastTokenAt !== undefined ? lastTokenAt - firstTokenAt : 0
          return {
            _tag: "Done",
            stopReason,
            usage: {
              promptTokens: prompt.length,
              reusedTokens: reused,
              generatedTokens: generated,
              reuse
            },
            timings: {
              queueMillis: (firstStepAt ?? now) - submitted,
              firstTokenMillis: (firstTokenAt ?? now) - submitted,
              decodeTokensPerSecond: generated > 1 && decodeMillis > 0 ? ((generated - 1) * 1000) / decodeMillis : 0,
              totalMillis: now - submitted
            },
            ...(checkpoint === undefined ? {} : { checkpoint }),
            ...(truncatedChannel === null ? {} : { truncatedChannel })
          } satisfies GenerateChunk
        }).pipe(Effect.tap((chunk) => recent.record(request.lane ?? "foreground", chunk)))
        /** Whether Done went out with the message that ended the output. */
        let doneSent = false
        const steps = worker.generate({
          prompt,
          maxTokens,
          sampling: request.sampling ?? { temperature: 0 },
          sequence: grant.slot,
          lane,
          confidence: request.probabilities,
          ...(topProbabilities > 0 ? { topProbabilities } : {}),
          // A continuation keeps everything (its history was decoded token by token, which no
          // cold run repeats); any other reuse keeps whole prefill chunks, for exact parity. A
          // continuation whose KV is not in its slot (evicted, no usable state file) recomputes
          // its history like a cold run.
          reuseOnGrid: !continued || attached === "absent",
          jsonSchema
        }).pipe(
          // A message from the engine (one step, or the steps that were ready) is handled as one
          // chunk and leaves as one: nothing per token is split off or awaited.
          Stream.mapChunksEffect((events) => {
            const now = clock.unsafeCurrentTimeMillis()
            firstStepAt ??= now
            const out: Array<ReadonlyArray<GenerateChunk>> = []
            for (const event of events) {
              const step = onEvent(event, now)
              if (Either.isLeft(step)) {
                // What came before the failure in the same message is delivered first (nothing lost).
                if (out.length === 0) return Effect.fail(step.left)
                failedAfter = { error: step.left, group: out[out.length - 1]! }
                endGroup = failedAfter.group
                break
              }
              out.push(step.right)
              // Stopping early (a stop string) stops pulling: the engine pauses and the generation ends.
              if (ended) {
                // Done leaves in the same message as the output's end: the client has its answer
                // before the engine's stream is closed and the request's resources are released.
                return Effect.map(finish, (chunk) => {
                  doneSent = true
                  endGroup = [...step.right, chunk]
                  out[out.length - 1] = endGroup
                  return Chunk.unsafeFromArray(out)
                })
              }
            }
            return Effect.succeed(Chunk.unsafeFromArray(out))
          }),
          Stream.takeUntil((group) => group === endGroup),
          // Keeps each message's chunks together (flattenIterables would split them).
          Stream.mapConcat(identity),
          Stream.concat(Stream.suspend(() => (failedAfter === undefined ? Stream.empty : Stream.fail(failedAfter.error))))
        )

        // Done, when the engine's stream ended without an end of its output.
        return Stream.concat(steps, Stream.suspend(() => (doneSent ? Stream.empty : Stream.fromEffect(finish))))
      })
    )

  const decide = (request: DecideRequest) =>
    Effect.scoped(Effect.gen(function*() {
      const submitted = yield* Clock.currentTimeMillis
      yield* validateDecide(request)
      const labels = [...new Set(request.heads.flatMap((h) => h.labels))]
      const { labelTokens, prompt } = yield* scheduler.beforeQueue(
        "decision",
        submitted,
        Effect.all({
          prompt: typeof request.prompt === "string"
            ? worker.tokenize("decision", request.prompt)
            : worker.render("decision", request.prompt),
          labelTokens: Effect.forEach(labels, (label) => worker.tokenize("decision", label), { concurrency: "unbounded" })
          // Sent together: the prompt and the labels cost one round trip to the child, not two.
        }, { concurrency: "unbounded" })
      )
      yield* checkLabelTokens(request.heads, new Map(labels.map((label, i) => [label, labelTokens[i]!.length])))
      // The exact budget, as for generations: the prompt and the longest label must fit the
      // admitted context, checked here with the numbers before anything is queued or scored.
      yield* admission.checkTokens("decision", prompt.length, Math.max(0, ...labelTokens.map((t) => t.length)))
      const { queuedMillis } = yield* scheduler.decision(`decide-${Crypto.randomUUID().slice(0, 8)}`, request.heads.length, submitted)
      const heads = yield* worker.score(prompt, request.heads)
      const now = yield* Clock.currentTimeMillis
      return {
        heads: heads.map((h) => ({
          name: h.name,
          labels: h.labels.map((l) => ({ label: l.label, probability: l.probability, rank: l.rank, logLikelihood: l.logLikelihood }))
        })),
        promptTokens: prompt.length,
        queueMillis: queuedMillis,
        totalMillis: now - submitted
      } satisfies DecideResult
    }))

  /** Tokenizes for `tokenize` or `count` (the name a QueueTimeout gives the call). */
  const tokenizeFor = (call: "tokenize" | "count", request: TokenizeRequest) =>
    Effect.gen(function*() {
      const submitted = yield* Clock.currentTimeMillis
      const role = request.role ?? "generation"
      yield* validateCount(request)
      const tokens = yield* scheduler.beforeQueue(
        call,
        submitted,
        request.messages !== undefined ? worker.render(role, request.messages) : worker.tokenize(role, request.text ?? "")
      )
      return { role, tokens, admittedContext: yield* admission.contextOf(role) } satisfies TokenizeResult
    })

  const tokenize = (request: TokenizeRequest) => tokenizeFor("tokenize", request)

  const count = (request: CountRequest) =>
    Effect.map(
      tokenizeFor("count", request),
      ({ admittedContext, role, tokens }) => ({ role, tokens: tokens.length, admittedContext }) satisfies CountResult
    )

  /**
   * Prefills a conversation's expected prompt (standing prefix and history, without the assistant
   * prompt) into its slot in the preparation lane, up to the last whole prefill chunk: the next
   * turn then continues on the chunk grid, as a cold run would split it. A turn of the
   * conversation preempts it at the next chunk boundary; what was prefilled stays.
   */
  const prepare = (request: PrepareRequest): Effect.Effect<PrepareResult, ProviderError> =>
    Effect.gen(function*() {
      const submitted = yield* Clock.currentTimeMillis
      yield* validatePrepare(request)
      const conversation = request.conversation
      const messages = [...request.prefix, ...request.history]
      const rendered = yield* scheduler.beforeQueue("preparation", submitted, worker.render("generation", messages, false))
      const chunk = prefillChunk
      const tokens = rendered.slice(0, Math.floor(rendered.length / chunk) * chunk)
      let done = 0
      const result = (complete: boolean): PrepareResult => ({
        conversation,
        preparedTokens: done,
        totalTokens: rendered.length,
        complete
      })
      if (tokens.length === 0) return result(true)
      yield* admission.checkTokens("generation", tokens.length, 1)
      yield* stopPreparing(conversation)
      const work = Effect.scoped(Effect.gen(function*() {
        const grant = yield* scheduler.generation({ lane: "preparation", label: `prepare-${conversation}`, conversation, submittedAt: submitted })
        yield* conversations.attach(conversation, grant.slot, grant.evicted)
        yield* worker.generate({ prompt: tokens, maxTokens: 1, sampling: { temperature: 0 }, sequence: grant.slot, lane: "preparation", prefillOnly: true, reuseOnGrid: true }).pipe(
          Stream.runForEach((event) =>
            Effect.sync(() => {
              if (event._tag === "Started") done = event.reusedTokens
              if (event._tag === "Prefilled") done = event.done
            })
          ),
          // The slot holds what was prefilled even when preempted: record it either way.
          Effect.ensuring(Effect.suspend(() =>
            done > 0
              ? Effect.zipRight(
                conversations.recordPrepared(conversation, grant.slot, tokens.slice(0, done)),
                Effect.sync(() => prepared.add(conversation))
              )
              : Effect.void
          ))
        )
      }))
      // Kept in the map under the conversation until it ends (a preempting turn interrupts it there).
      const fiber = yield* FiberMap.run(preparing, conversation, work)
      const exit = yield* Fiber.await(fiber)
      if (Exit.isSuccess(exit)) return result(done >= tokens.length)
      if (Exit.isInterrupted(exit)) return result(false)
      return yield* Effect.failCause(exit.cause)
    }).pipe(Effect.onInterrupt(() => stopPreparing(request.conversation)))

  const readiness = Effect.gen(function*() {
    const ready = yield* worker.readiness
    const budget = yield* admission.status
    const sched = yield* scheduler.status
    return {
      state: ready.state,
      reason: ready.reason ?? null,
      engine: {
        incarnation: ready.incarnation,
        pid: ready.pid ?? null,
        backend: ready.backend ?? null,
        nodeLlamaCppVersion: ready.hello?.nodeLlamaCppVersion ?? null,
        uptimeMillis: ready.uptimeMillis,
        build: ready.hello?.build ?? null,
        ...(ready.hello === undefined ? {} : { threads: ready.hello.threads }),
        driverVersion: ready.hello?.driverVersion ?? null,
        devices: (ready.hello?.devices ?? []).map(({ freeBytes, kind, name, totalBytes }) => ({ name, kind, totalBytes, freeBytes }))
      },
      budget: {
        device: budget.device.name,
        kind: budget.device.kind,
        source: budget.device.source,
        totalBytes: budget.totalBytes,
        budgetBytes: budget.budgetBytes,
        chargedBytes: budget.chargedBytes,
        freeBytes: budget.freeBytes,
        waiting: budget.waiting.length,
        weightsBytes: budget.byKind.weights.bytes,
        kvBytes: budget.byKind.kv.bytes,
        workspaceBytes: budget.byKind.workspace.bytes
      },
      roles: ready.roles.map((r) => {
        const admitted = budget.admitted?.roles.find((a) => a.role === r.role)
        return {
          role: r.role,
          model: r.revision?.model ?? Path.basename(r.modelPath).replace(/\.gguf$/i, ""),
          modelPath: r.modelPath,
          manifestDigest: r.revision?.manifestDigest ?? null,
          revision: r.revision?.revision ?? null,
          admittedContext: r.admittedContext ?? admitted?.contextSize ?? null,
          contextCap: admitted?.cap ?? null,
          limitedBy: admitted?.limitedBy ?? null,
          weightsBytes: admitted?.weightsBytes ?? null,
          kvBytes: admitted?.contextBytes ?? null
        }
      }),
      scheduler: sched,
      recoveryActions: ready.recoveryActions.map((a) => ({ ...a, at: a.at.toISOString() })),
      recentGenerations: recent.list()
    } satisfies Readiness
  })

  return Provider.of({
    generate,
    decide,
    count,
    tokenize,
    prepare,
    readiness,
    readinessChanges: Stream.mapEffect(worker.states, () => readiness)
  })
})

export const layer: Layer.Layer<Provider, never, NativeWorker | Admission | Scheduler | Conversations | ProviderConfig> =
  Layer.scoped(Provider, make)
