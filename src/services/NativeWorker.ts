/**
 * NativeWorker: one supervised engine child with both roles resident, as a service. It spawns the
 * child, completes hello, loads the generation and decision models, warms them (one tiny
 * generation and one score), and only then serves. A child's exit, a hang (progress deadlines and
 * an idle heartbeat) or a protocol violation is repaired once, however many fibers notice it: the
 * broken child is stopped and its exit observed before its scope is released, and a warmed
 * replacement takes over. Beyond the restart budget it reports `failed` with the reason and tries
 * again after a backoff or an explicit `repair()`.
 *
 * Requests that had not reached the child wait for a ready engine (bounded); a generation whose
 * child fails before its first token was delivered runs again on the replacement (once); one that
 * was streaming fails with GenerationFailed saying how many tokens were delivered; a score is
 * retried once on the replacement. A reply that fails its schema is a protocol fault of the child.
 *
 * The parts live in worker/: NativeWorkerConfig (configuration), ChildFaults (what counts as the
 * child's fault), Incarnation (one child as a scoped resource), RestartBudget (the budget as a
 * Schedule), Supervisor (the current child, its repair and the heartbeat), Generation, Scoring,
 * Readiness, and WorkerHooks (admission and per-child resources). This module holds the Tag and
 * composes them.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import type { RpcClientError } from "@effect/rpc/RpcClientError"
import type * as Stream from "effect/Stream"
import type { EngineError, GenerationFailed } from "../domain/EngineError.js"
import type { GenerationEvent, HeadScore, TokenGenerateRequest } from "../domain/Generation.js"
import type { ChatMessage, DecisionHead, EngineState, Role } from "../domain/Inference.js"
import type { TemplateInputs } from "../native/Protocol.js"
import { publicError, type WorkerError } from "./worker/ChildErrors.js"
import { retryOnce, unavailable } from "./worker/ChildFaults.js"
import type { Incarnation } from "./worker/Incarnation.js"
import * as Generation from "./worker/Generation.js"
import { NativeWorkerConfig } from "./worker/NativeWorkerConfig.js"
import type { WorkerReadiness } from "./worker/Readiness.js"
import * as Scoring from "./worker/Scoring.js"
import * as Supervisor from "./worker/Supervisor.js"
import { ChildResources, type Planner, WorkerAdmission } from "./worker/WorkerHooks.js"

export type { GenerationEvent, TokenGenerateRequest } from "../domain/Generation.js"
export { NativeWorkerConfig, type NativeWorkerConfigShape, type RoleModel } from "./worker/NativeWorkerConfig.js"
export type { RecoveryAction, WorkerReadiness } from "./worker/Readiness.js"
export type { MeasuredGrowth, Planner } from "./worker/WorkerHooks.js"
export { ChildResources, layerNoop as hooksNoop, WorkerAdmission } from "./worker/WorkerHooks.js"

export type { WorkerError } from "./worker/ChildErrors.js"

export class NativeWorker extends Context.Tag("nativegen/NativeWorker")<NativeWorker, {
  /** Streams a generation's steps: Started (with reused prompt tokens), Prefilled chunks, Tokens, Finished. */
  readonly generate: (request: TokenGenerateRequest) => Stream.Stream<GenerationEvent, WorkerError | GenerationFailed>
  /**
   * Per head, each label's teacher-forced log-likelihood, probability and rank, from the decision
   * model. The prompt is prefilled in chunks of `prefillChunk` tokens, each a step of its own:
   * interrupting the call stops it at the next chunk. `onPrefilled` sees each chunk's progress.
   * Decisions run one at a time; a decision lost with its child is retried once on the replacement.
   */
  readonly score: (
    prompt: ReadonlyArray<number>,
    heads: ReadonlyArray<DecisionHead>,
    onPrefilled?: (done: number, total: number) => Effect.Effect<void>
  ) => Effect.Effect<ReadonlyArray<HeadScore>, WorkerError>
  readonly tokenize: (role: Role, text: string, specialTokens?: boolean) => Effect.Effect<ReadonlyArray<number>, WorkerError>
  readonly detokenize: (role: Role, tokens: ReadonlyArray<number>) => Effect.Effect<string, WorkerError>
  /** A chat as text through the role model's template, with or without the assistant prompt. */
  readonly renderText: (
    role: Role,
    messages: ReadonlyArray<ChatMessage>,
    addGenerationPrompt: boolean,
    inputs?: TemplateInputs
  ) => Effect.Effect<string, WorkerError>
  /**
   * A continued turn's new tokens after the held ones (the close of the last assistant turn and
   * the new turn), rendered and tokenized in the child in one request; or why the template does not
   * allow it (src/domain/Continuation.ts).
   */
  readonly renderContinuation: (
    role: Role,
    history: ReadonlyArray<ChatMessage>,
    turn: ReadonlyArray<ChatMessage>,
    inputs: TemplateInputs,
    turnInputs: TemplateInputs
  ) => Effect.Effect<{ readonly tokens: ReadonlyArray<number> } | { readonly refused: string }, WorkerError>
  /** Saves an idle generation sequence's KV state to a file (in the current child). */
  readonly saveState: (
    sequence: number,
    path: string
  ) => Effect.Effect<{ readonly fileBytes: number; readonly tokens: number; readonly incarnation: number }, WorkerError>
  /** Loads a verified state file into an idle generation sequence. */
  readonly restoreState: (sequence: number, path: string) => Effect.Effect<{ readonly tokens: number }, WorkerError>
  /** A chat rendered through the role model's own template, ending with the assistant prompt, as exact tokens. */
  readonly render: (
    role: Role,
    messages: ReadonlyArray<ChatMessage>,
    addGenerationPrompt?: boolean,
    inputs?: TemplateInputs
  ) => Effect.Effect<ReadonlyArray<number>, WorkerError>
  /** The native allocation plan of a model over candidate context sizes, without loading it. */
  readonly plan: Planner
  readonly readiness: Effect.Effect<WorkerReadiness>
  /** Readiness states as they change (the current one first). */
  readonly states: Stream.Stream<EngineState>
  /** Asks for a repair now: a failed worker tries again at once; a ready one is left alone. */
  readonly repair: Effect.Effect<void>
}>() {}

export const make: Effect.Effect<
  NativeWorker["Type"],
  never,
  NativeWorkerConfig | WorkerAdmission | ChildResources | Scope.Scope
> = Effect.gen(function*() {
  const config = yield* NativeWorkerConfig
  const supervisor = yield* Supervisor.make
  const call = <A, E extends EngineError>(
    f: (incarnation: Incarnation) => Effect.Effect<A, E | RpcClientError>
  ) => Effect.mapError(unavailable(retryOnce(supervisor.onReady(f))), publicError)
  return NativeWorker.of({
    generate: Generation.make(supervisor, config),
    score: yield* Scoring.make(supervisor, config),
    tokenize: (role, text, specialTokens = false) => call((i) => i.child.client.Tokenize({ role, text, specialTokens })),
    detokenize: (role, tokens) => call((i) => i.child.client.Detokenize({ role, tokens })),
    render: (role, messages, addGenerationPrompt, inputs) =>
      call((i) => i.child.client.Render({ ...inputs, role, messages, addGenerationPrompt })),
    renderText: (role, messages, addGenerationPrompt, inputs) =>
      call((i) => i.child.client.RenderText({ ...inputs, role, messages, addGenerationPrompt })),
    renderContinuation: (role, history, turn, inputs, turnInputs) =>
      call((i) => i.child.client.RenderContinuation({ role, history, turn, inputs, turnInputs })),
    // Not retried: a state lives in one child; the caller decides what a lost save means.
    saveState: (sequence, path) =>
      unavailable(supervisor.onReady((i) =>
        Effect.map(i.child.client.SaveState({ sequence, path }), (r) => ({ ...r, incarnation: i.number }))
      )).pipe(Effect.mapError(publicError)),
    restoreState: (sequence, path) =>
      unavailable(supervisor.onReady((i) => i.child.client.RestoreState({ sequence, path }))).pipe(Effect.mapError(publicError)),
    // The planner is admission's (internal): its errors stay the engine's own.
    plan: (modelPath, contextSizes, sequences) =>
      unavailable(retryOnce(supervisor.onReady((i) => i.child.client.Plan({ modelPath, contextSizes, sequences })))),
    readiness: supervisor.readiness,
    states: supervisor.states,
    repair: supervisor.repair
  })
})

export const layer: Layer.Layer<NativeWorker, never, NativeWorkerConfig | WorkerAdmission | ChildResources> = Layer.scoped(
  NativeWorker,
  make
)
