/**
 * Provider: the public Effect API of the runtime. Embedders, the RPC server and the command line
 * call only this. `generate` streams channel-tagged text and ends with usage, timings, the stop
 * reason and a checkpoint; `decide` scores labels on the decision model; `count` gives exact token
 * counts through the chat template; `prepare` prefills a conversation's expected prompt while the
 * engine is idle; `readiness` reports the engine, the device budget and the admitted contexts.
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Stream from "effect/Stream"
import * as Crypto from "node:crypto"
import type {
  ChatMessage,
  CountRequest,
  CountResult,
  DecideRequest,
  DecideResult,
  GenerateChunk,
  GenerateRequest,
  PrepareRequest,
  PrepareResult,
  Readiness,
  StopReason
} from "../domain/Inference.js"
import { Admission } from "./Admission.js"
import { NativeWorker, type WorkerReadiness } from "./NativeWorker.js"
import { InvalidRequest, type ProviderError } from "./ProviderError.js"
import { outputState } from "./provider/Output.js"
import { Scheduler } from "./Scheduler.js"

export class Provider extends Context.Tag("nativegen/Provider")<Provider, {
  /** Streams a generation: Text chunks (per channel), then one Done chunk. Interrupt to cancel. */
  readonly generate: (request: GenerateRequest) => Stream.Stream<GenerateChunk, ProviderError>
  /** Per head, each label's probability and rank, from the decision model. */
  readonly decide: (request: DecideRequest) => Effect.Effect<DecideResult, ProviderError>
  /** Exact token count through the role model's chat template. */
  readonly count: (request: CountRequest) => Effect.Effect<CountResult, ProviderError>
  /** Prefills a conversation's expected prompt in the preparation lane. */
  readonly prepare: (request: PrepareRequest) => Effect.Effect<PrepareResult, ProviderError>
  readonly readiness: Effect.Effect<Readiness>
  /** Readiness whenever the engine state changes (the current one first). */
  readonly readinessChanges: Stream.Stream<Readiness>
}>() {}

/** Most heads in one decision request, and most stop strings in one generation. */
export const MAX_HEADS = 16
export const MAX_STOP_STRINGS = 16

const invalid = (field: string, value: unknown, reason: string) =>
  new InvalidRequest({ field, value: JSON.stringify(value) ?? String(value), reason })

const validateMessages = (messages: ReadonlyArray<ChatMessage>) =>
  messages.length === 0 ? Effect.fail(invalid("messages", messages, "at least one message is needed")) : Effect.void

const validateGenerate = (request: GenerateRequest) =>
  Effect.gen(function*() {
    yield* validateMessages(request.messages)
    if (!Number.isSafeInteger(request.maxTokens) || request.maxTokens <= 0) {
      return yield* invalid("maxTokens", request.maxTokens, "must be a positive integer")
    }
    const stop = request.stop ?? []
    if (stop.length > MAX_STOP_STRINGS) return yield* invalid("stop", stop.length, `at most ${MAX_STOP_STRINGS} stop strings`)
    const empty = stop.find((s) => s.length === 0)
    if (empty !== undefined) return yield* invalid("stop", empty, "a stop string must not be empty")
    const sampling = request.sampling
    if (sampling !== undefined) {
      if (!(sampling.temperature >= 0) || !Number.isFinite(sampling.temperature)) {
        return yield* invalid("sampling.temperature", sampling.temperature, "must be a finite number >= 0")
      }
      if (sampling.topK !== undefined && sampling.topK < 0) return yield* invalid("sampling.topK", sampling.topK, "must be >= 0")
      if (sampling.topP !== undefined && !(sampling.topP > 0 && sampling.topP <= 1)) {
        return yield* invalid("sampling.topP", sampling.topP, "must be in (0, 1]")
      }
    }
    if (request.conversation !== undefined && (request.conversation.length === 0 || request.conversation.length > 256)) {
      return yield* invalid("conversation", request.conversation, "must be 1 to 256 characters")
    }
  })

const fromEither = <A, E>(either: Either.Either<A, E>): Effect.Effect<A, E> =>
  Either.match(either, { onLeft: Effect.fail, onRight: Effect.succeed })

type Step =
  | { readonly _tag: "Chunks"; readonly chunks: ReadonlyArray<GenerateChunk>; readonly last: boolean }

export const make = Effect.gen(function*() {
  const worker = yield* NativeWorker
  const admission = yield* Admission
  const scheduler = yield* Scheduler

  const specialTokensOf = (ready: WorkerReadiness) =>
    ready.models.find((m) => m.role === "generation")?.specialTokens ??
      { thinkOpen: null, thinkClose: null, toolOpen: null, toolClose: null }

  const generate = (request: GenerateRequest): Stream.Stream<GenerateChunk, ProviderError> =>
    Stream.unwrapScoped(
      Effect.gen(function*() {
        const submitted = yield* Clock.currentTimeMillis
        yield* validateGenerate(request)
        const prompt = yield* worker.render("generation", request.messages)
        yield* admission.checkTokens("generation", prompt.length, request.maxTokens)
        const label = `generate-${Crypto.randomUUID().slice(0, 8)}`
        const grant = yield* scheduler.generation({
          lane: request.lane ?? "foreground",
          label,
          conversation: request.conversation
        })
        const output = outputState(specialTokensOf(yield* worker.readiness), request.stop ?? [])
        let reused = 0
        let generated = 0
        let firstStepAt: number | undefined
        let firstTokenAt: number | undefined
        let lastTokenAt: number | undefined
        let stopReason: StopReason = "maxTokens"

        const steps = worker.generate({
          prompt,
          maxTokens: request.maxTokens,
          sampling: request.sampling ?? { temperature: 0 },
          sequence: grant.slot,
          lane: request.lane ?? "foreground"
        }).pipe(
          Stream.mapEffect((event): Effect.Effect<Step, ProviderError> =>
            Effect.gen(function*() {
              const now = yield* Clock.currentTimeMillis
              firstStepAt ??= now
              switch (event._tag) {
                case "Started":
                  reused = event.reusedTokens
                  return { _tag: "Chunks", chunks: [], last: false }
                case "Prefilled":
                  return { _tag: "Chunks", chunks: [], last: false }
                case "Token": {
                  generated++
                  firstTokenAt ??= now
                  lastTokenAt = now
                  const { chunks, stopped } = yield* fromEither(output.token(event.token, event.text))
                  if (stopped) stopReason = "stopString"
                  return { _tag: "Chunks", chunks, last: stopped }
                }
                case "Finished": {
                  stopReason = event.reason === "maxTokens" ? "maxTokens" : "endOfGeneration"
                  return { _tag: "Chunks", chunks: yield* fromEither(output.finish()), last: true }
                }
              }
            })
          ),
          // Stopping early (a stop string) stops pulling: the engine pauses and the generation ends.
          Stream.takeUntil((step) => step.last),
          Stream.mapConcat((step) => step.chunks)
        )

        const done = Effect.gen(function*() {
          const now = yield* Clock.currentTimeMillis
          const decodeMillis = firstTokenAt !== undefined && lastTokenAt !== undefined ? lastTokenAt - firstTokenAt : 0
          return {
            _tag: "Done",
            stopReason,
            usage: {
              promptTokens: prompt.length,
              reusedTokens: reused,
              generatedTokens: generated,
              reuse: reused > 0 ? "prefix" : "cold"
            },
            timings: {
              queueMillis: (firstStepAt ?? now) - submitted,
              firstTokenMillis: (firstTokenAt ?? now) - submitted,
              decodeTokensPerSecond: generated > 1 && decodeMillis > 0 ? ((generated - 1) * 1000) / decodeMillis : 0,
              totalMillis: now - submitted
            }
          } satisfies GenerateChunk
        })
        return Stream.concat(steps, Stream.fromEffect(done))
      })
    )

  const decide = (request: DecideRequest) =>
    Effect.scoped(Effect.gen(function*() {
      const submitted = yield* Clock.currentTimeMillis
      if (request.heads.length === 0) return yield* invalid("heads", request.heads, "at least one head is needed")
      if (request.heads.length > MAX_HEADS) return yield* invalid("heads", request.heads.length, `at most ${MAX_HEADS} heads`)
      if (typeof request.prompt !== "string") yield* validateMessages(request.prompt)
      else if (request.prompt.length === 0) return yield* invalid("prompt", request.prompt, "must not be empty")
      const prompt = typeof request.prompt === "string"
        ? yield* worker.tokenize("decision", request.prompt)
        : yield* worker.render("decision", request.prompt)
      const { queuedMillis } = yield* scheduler.decision(`decide-${Crypto.randomUUID().slice(0, 8)}`, request.heads.length)
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

  const count = (request: CountRequest) =>
    Effect.gen(function*() {
      const role = request.role ?? "generation"
      const tokens = request.messages !== undefined && request.text === undefined
        ? yield* Effect.zipRight(validateMessages(request.messages), worker.render(role, request.messages))
        : request.text !== undefined && request.messages === undefined
        ? yield* worker.tokenize(role, request.text)
        : yield* invalid("request", Object.keys(request), "give exactly one of messages or text")
      return { role, tokens: tokens.length, admittedContext: yield* admission.contextOf(role) } satisfies CountResult
    })

  const prepare = (request: PrepareRequest): Effect.Effect<PrepareResult, ProviderError> =>
    Effect.fail(invalid("prepare", request.conversation, "preparation is not available in this version"))

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
        uptimeMillis: ready.uptimeMillis
      },
      budget: {
        device: budget.device.name,
        kind: budget.device.kind,
        source: budget.device.source,
        totalBytes: budget.totalBytes,
        budgetBytes: budget.budgetBytes,
        chargedBytes: budget.chargedBytes,
        freeBytes: budget.freeBytes,
        waiting: budget.waiting.length
      },
      roles: ready.roles.map((r) => {
        const admitted = budget.admitted?.roles.find((a) => a.role === r.role)
        return {
          role: r.role,
          modelPath: r.modelPath,
          manifestDigest: r.revision?.manifestDigest ?? null,
          revision: r.revision?.revision ?? null,
          admittedContext: r.admittedContext ?? admitted?.contextSize ?? null,
          contextCap: admitted?.cap ?? null,
          limitedBy: admitted?.limitedBy ?? null
        }
      }),
      scheduler: sched,
      recoveryActions: ready.recoveryActions.map((a) => ({ ...a, at: a.at.toISOString() }))
    } satisfies Readiness
  })

  return Provider.of({
    generate,
    decide,
    count,
    prepare,
    readiness,
    readinessChanges: Stream.mapEffect(worker.states, () => readiness)
  })
})

export const layer: Layer.Layer<Provider, never, NativeWorker | Admission | Scheduler> = Layer.effect(Provider, make)
