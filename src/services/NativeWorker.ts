/**
 * NativeWorker: one engine child with both roles resident. It spawns the child, completes hello,
 * loads the generation and decision models, and offers generation as an Effect Stream, label
 * scoring, tokenize/render and readiness. Interrupting a generation pauses it in the child at the
 * next step boundary and ends it there; the child stays usable. Closing the scope stops the child
 * (graceful request, SIGTERM, SIGKILL) and waits for its exit.
 */
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Ref from "effect/Ref"
import * as Stream from "effect/Stream"
import * as Crypto from "node:crypto"
import { EngineUnavailable, type EngineError } from "../domain/EngineError.js"
import { type ChildSettings, defaultChildSettings } from "../native/ChildSettings.js"
import { type EngineChild, spawn, type SpawnFailed } from "../native/ChildProcess.js"
import type {
  AdvanceEvent,
  ChatMessage,
  HeadScore,
  HelloInfo,
  LoadedModel,
  ModelPlan,
  Role,
  Sampling
} from "../native/Protocol.js"

/** Where a role's model comes from and how it is loaded. */
export interface RoleModel {
  readonly modelPath: string
  readonly contextSize: number
  /** Parallel sequences (conversation slots) in the role's context. Default 1. */
  readonly sequences?: number | undefined
}

export interface NativeWorkerConfigShape {
  readonly child: ChildSettings
  readonly models: { readonly [R in Role]?: RoleModel | undefined }
  /** Tokens per prefill chunk: the granularity at which prefill can be paused or cancelled. */
  readonly prefillChunk: number
  /** Deadline for each stage of a graceful stop before the next, harder one. */
  readonly stopTimeout: Duration.Duration
  /** Extra child environment (test failpoints); not reachable from any public interface. */
  readonly childEnv?: Readonly<Record<string, string>> | undefined
}

export class NativeWorkerConfig extends Context.Tag("nativegen/NativeWorkerConfig")<
  NativeWorkerConfig,
  NativeWorkerConfigShape
>() {
  static readonly defaults: NativeWorkerConfigShape = {
    child: defaultChildSettings,
    models: {},
    prefillChunk: 128,
    stopTimeout: Duration.seconds(5)
  }
  static readonly layer = (config: Partial<NativeWorkerConfigShape>) =>
    Layer.succeed(NativeWorkerConfig, { ...NativeWorkerConfig.defaults, ...config })
}

export type WorkerState = "starting" | "loading" | "ready" | "stopped"

export interface WorkerReadiness {
  readonly state: WorkerState
  readonly pid: number
  readonly hello: HelloInfo
  readonly models: ReadonlyArray<LoadedModel>
  readonly startedAt: Date
}

export interface GenerateRequest {
  readonly prompt: ReadonlyArray<number>
  readonly maxTokens: number
  readonly sampling: Sampling
  readonly stopTokens?: ReadonlyArray<number> | undefined
  /** The generation-role sequence (slot) to run on. Default 0. */
  readonly sequence?: number | undefined
}

export type GenerationEvent = AdvanceEvent | { readonly _tag: "Started"; readonly reusedTokens: number }

export type WorkerError = EngineError | EngineUnavailable

export class NativeWorker extends Context.Tag("nativegen/NativeWorker")<NativeWorker, {
  /** Streams a generation's steps: Started (with reused prompt tokens), Prefilled chunks, Tokens, Finished. */
  readonly generate: (request: GenerateRequest) => Stream.Stream<GenerationEvent, WorkerError>
  /** Per head, each label's teacher-forced log-likelihood, probability and rank, from the decision model. */
  readonly score: (
    prompt: ReadonlyArray<number>,
    heads: ReadonlyArray<{ readonly name: string; readonly labels: ReadonlyArray<string> }>
  ) => Effect.Effect<ReadonlyArray<HeadScore>, WorkerError>
  readonly tokenize: (role: Role, text: string, specialTokens?: boolean) => Effect.Effect<ReadonlyArray<number>, WorkerError>
  readonly detokenize: (role: Role, tokens: ReadonlyArray<number>) => Effect.Effect<string, WorkerError>
  /** A chat rendered through the role model's own template, ending with the assistant prompt, as exact tokens. */
  readonly render: (role: Role, messages: ReadonlyArray<ChatMessage>) => Effect.Effect<ReadonlyArray<number>, WorkerError>
  /** The native allocation plan of a model over candidate context sizes, without loading it. */
  readonly plan: (
    modelPath: string,
    contextSizes: ReadonlyArray<number>,
    sequences: number
  ) => Effect.Effect<ModelPlan, WorkerError>
  readonly readiness: Effect.Effect<WorkerReadiness>
}>() {}

/** A transport failure means the child is gone or broken: the caller sees EngineUnavailable. */
const unavailable = <A, E, R>(self: Effect.Effect<A, E | { readonly _tag: "RpcClientError"; readonly message: string }, R>) =>
  Effect.catchIf(
    self,
    (e): e is { readonly _tag: "RpcClientError"; readonly message: string } =>
      typeof e === "object" && e !== null && "_tag" in e && e._tag === "RpcClientError",
    (e) => Effect.fail(new EngineUnavailable({ reason: e.message }))
  ) as Effect.Effect<A, Exclude<E, { readonly _tag: "RpcClientError" }> | EngineUnavailable, R>

export const make: Effect.Effect<
  NativeWorker["Type"],
  SpawnFailed | WorkerError,
  NativeWorkerConfig | import("effect/Scope").Scope
> = Effect.gen(function*() {
  const config = yield* NativeWorkerConfig
  const state = yield* Ref.make<WorkerState>("starting")
  const startedAt = new Date()
  const child: EngineChild = yield* spawn({
    settings: config.child,
    env: config.childEnv,
    stopTimeout: config.stopTimeout
  })
  yield* Effect.addFinalizer(() => Ref.set(state, "stopped"))
  const { client } = child
  const hello = yield* unavailable(client.Hello())
  yield* Ref.set(state, "loading")
  const models: Array<LoadedModel> = []
  for (const role of ["generation", "decision"] as const) {
    const model = config.models[role]
    if (model === undefined) continue
    models.push(
      yield* unavailable(
        client.Load({ role, modelPath: model.modelPath, contextSize: model.contextSize, sequences: model.sequences ?? 1 })
      )
    )
  }
  yield* Ref.set(state, "ready")

  const generate = (request: GenerateRequest): Stream.Stream<GenerationEvent, WorkerError> =>
    Stream.unwrapScoped(
      Effect.gen(function*() {
        const generationId = Crypto.randomUUID()
        const { reusedTokens } = yield* unavailable(
          client.Begin({
            generationId,
            sequence: request.sequence ?? 0,
            prompt: request.prompt,
            sampling: request.sampling,
            maxTokens: request.maxTokens,
            stopTokens: request.stopTokens ?? [],
            prefillChunk: config.prefillChunk
          })
        )
        yield* Effect.addFinalizer(() => Effect.ignore(client.End({ generationId })))
        const steps: Stream.Stream<GenerationEvent, WorkerError> = client.Advance({ generationId, fromIndex: 0 }).pipe(
          Stream.catchTag("RpcClientError", (e) => Stream.fail(new EngineUnavailable({ reason: e.message })))
        )
        return Stream.concat(Stream.make<Array<GenerationEvent>>({ _tag: "Started", reusedTokens }), steps)
      })
    )

  return NativeWorker.of({
    generate,
    score: (prompt, heads) => unavailable(client.Score({ prompt, heads })),
    tokenize: (role, text, specialTokens = false) => unavailable(client.Tokenize({ role, text, specialTokens })),
    detokenize: (role, tokens) => unavailable(client.Detokenize({ role, tokens })),
    render: (role, messages) => unavailable(client.Render({ role, messages })),
    plan: (modelPath, contextSizes, sequences) => unavailable(client.Plan({ modelPath, contextSizes, sequences })),
    readiness: Effect.map(Ref.get(state), (s) => ({ state: s, pid: child.pid, hello, models, startedAt }))
  })
})

export const layer: Layer.Layer<NativeWorker, SpawnFailed | WorkerError, NativeWorkerConfig> = Layer.scoped(
  NativeWorker,
  make
)
