/**
 * NativeWorker: one supervised engine child with both roles resident. It spawns the child,
 * completes hello, loads the generation and decision models, warms them (one tiny generation and
 * one score), and only then serves. It detects a child's exit (observed through the process), a
 * hang (a progress deadline per step, a longer one per load that restarts on load progress, and an
 * idle heartbeat) and protocol violations (any transport or decoding failure). A failure is
 * repaired once, however many fibers notice it: the broken child is stopped (SIGTERM, then
 * SIGKILL) and its exit observed before its scope (and the leases in it) is released, and a warmed
 * replacement takes over. Beyond the restart budget it stops restarting, reports `failed` with the
 * reason, and tries again after a backoff or an explicit `repair()`.
 *
 * Requests that had not reached the child wait for a ready engine (bounded); a generation whose
 * child fails before its first token was delivered runs again on the replacement (once); one that
 * was streaming fails with GenerationFailed saying how many tokens were delivered; a score is
 * retried once on the replacement. A reply that fails its schema is a protocol fault of the child.
 * A repair, once begun, runs to its end whoever asked for it: the state ends `ready` or `failed`.
 */
import * as Socket from "@effect/platform/Socket"
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as ExecutionStrategy from "effect/ExecutionStrategy"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import * as Ref from "effect/Ref"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as SubscriptionRef from "effect/SubscriptionRef"
import * as Crypto from "node:crypto"
import { type EngineError, EngineUnavailable, GenerationFailed } from "../domain/EngineError.js"
import { type ChildSettings, defaultChildSettings } from "../native/ChildSettings.js"
import { type EngineChild, spawn } from "../native/ChildProcess.js"
import type {
  AdvanceEvent,
  ChatMessage,
  DeviceInfo,
  HeadScore,
  HelloInfo,
  Lane,
  LoadedModel,
  Role,
  Sampling
} from "../native/Protocol.js"
import { isExhausted, recordFailure } from "./worker/RestartBudget.js"
import { ChildResources, type Planner, WorkerAdmission } from "./worker/WorkerHooks.js"

/** Where a role's model comes from and how it is loaded. */
export interface RoleModel {
  readonly modelPath: string
  readonly contextSize: number
  /** Parallel sequences (conversation slots) in the role's context. Default 1. */
  readonly sequences?: number | undefined
  /** The host-owned revision of this model (manifest digest and revision), shown in readiness. */
  readonly revision?: { readonly manifestDigest: string; readonly revision: number } | undefined
}

export type { MeasuredGrowth, Planner } from "./worker/WorkerHooks.js"
export { ChildResources, layerNoop as hooksNoop, WorkerAdmission } from "./worker/WorkerHooks.js"

export interface NativeWorkerConfigShape {
  readonly child: ChildSettings
  readonly models: { readonly [R in Role]?: RoleModel | undefined }
  /** Tokens per prefill chunk: the granularity at which prefill can be paused or cancelled. Default 128. */
  readonly prefillChunk: number
  /** Deadline for each stage of a graceful stop before the next, harder one. Default 5 s. */
  readonly stopTimeout: Duration.Duration
  /** A step or call that makes no progress for this long means the child hangs. Default 30 s. */
  readonly stepDeadline: Duration.Duration
  /** A child that has not answered hello this long after its spawn is stuck. Default 60 s. */
  readonly startDeadline: Duration.Duration
  /** A model load with no load progress for this long means the child hangs. Default 120 s. */
  readonly loadDeadline: Duration.Duration
  /** How often an idle ready child is probed. Default 5 s. */
  readonly heartbeatInterval: Duration.Duration
  /** Failures tolerated within `restartPeriod` before giving up. Default 3. */
  readonly restartIntensity: number
  /** Default 60 s. */
  readonly restartPeriod: Duration.Duration
  /** After the budget is exhausted, wait this long before trying again. Default 30 s. */
  readonly restartBackoff: Duration.Duration
  /** How long a request waits for a ready engine before EngineUnavailable. Default 60 s. */
  readonly readyTimeout: Duration.Duration
  /** Recovery actions kept for readiness. Default 32. */
  readonly recoveryLogLength: number
  /** Recovery actions taken before this worker was made (the runtime's model fallbacks), listed first. Default none. */
  readonly recoveryActions?: ReadonlyArray<RecoveryAction> | undefined
  /**
   * Variables set only in engine children, never in the host (driver settings such as
   * `VK_DRIVER_FILES` or `CUDA_VISIBLE_DEVICES` for the engine alone, test failpoints). Children do
   * not get the host's whole environment: only PATH, HOME, the locale, TMPDIR, and what
   * node-llama-cpp, ggml and the GPU runtimes read (the list is in native/ChildEnvironment.ts),
   * then these, then the child's settings (which these cannot override). Default {}.
   */
  readonly childEnv: Readonly<Record<string, string>>
  /** The Node executable for children; overridable to test spawn failures. */
  readonly execPath?: string | undefined
}

export class NativeWorkerConfig extends Context.Tag("nativegen/NativeWorkerConfig")<
  NativeWorkerConfig,
  NativeWorkerConfigShape
>() {
  static readonly defaults: NativeWorkerConfigShape = {
    child: defaultChildSettings,
    models: {},
    prefillChunk: 128,
    stopTimeout: Duration.seconds(5),
    stepDeadline: Duration.seconds(30),
    startDeadline: Duration.seconds(60),
    loadDeadline: Duration.seconds(120),
    heartbeatInterval: Duration.seconds(5),
    restartIntensity: 3,
    restartPeriod: Duration.seconds(60),
    restartBackoff: Duration.seconds(30),
    readyTimeout: Duration.seconds(60),
    recoveryLogLength: 32,
    childEnv: {}
  }
  static readonly layer = (config: Partial<NativeWorkerConfigShape>) =>
    Layer.succeed(NativeWorkerConfig, { ...NativeWorkerConfig.defaults, ...config })
}

export type WorkerState = "starting" | "loading" | "warming" | "ready" | "repairing" | "failed" | "stopped"

export interface RecoveryAction {
  readonly at: Date
  /** `trust`: an activation passed over; `load`: a role's model the engine refused to load. */
  readonly kind: "exit" | "hang" | "protocol" | "start" | "admission" | "budget" | "repair-request" | "trust" | "load"
  readonly reason: string
  readonly outcome: "replaced" | "failed" | "gave-up" | "pending" | "fell-back"
}

export interface WorkerReadiness {
  readonly state: WorkerState
  /** Why the state is what it is, when it is not ready. */
  readonly reason: string | undefined
  readonly incarnation: number
  readonly pid: number | undefined
  readonly backend: string | undefined
  readonly devices: ReadonlyArray<DeviceInfo>
  readonly hello: HelloInfo | undefined
  readonly models: ReadonlyArray<LoadedModel>
  /** Per role: the host-owned revision and the admitted context. */
  readonly roles: ReadonlyArray<{
    readonly role: Role
    readonly modelPath: string
    readonly revision: RoleModel["revision"]
    readonly admittedContext: number | undefined
  }>
  readonly uptimeMillis: number
  readonly recoveryActions: ReadonlyArray<RecoveryAction>
  /**
   * When the engine refused to load a role's model (a typed failure of the load, not a crash):
   * which role and why. The worker does not restart for it (it would only repeat); another model
   * for the role can be tried. Cleared when a child starts.
   */
  readonly loadFailure: { readonly role: Role; readonly reason: string } | undefined
}

export interface GenerateRequest {
  readonly prompt: ReadonlyArray<number>
  readonly maxTokens: number
  readonly sampling: Sampling
  readonly stopTokens?: ReadonlyArray<number> | undefined
  /** The generation-role sequence (slot) to run on. Default 0. */
  readonly sequence?: number | undefined
  /** The lane its steps queue in at the engine's step gate. Default foreground. */
  readonly lane?: Lane | undefined
  /** Only prefill the prompt into the sequence (preparation); nothing is sampled. */
  readonly prefillOnly?: boolean | undefined
  /** Report each sampled token's probability on its Token event. */
  readonly confidence?: boolean | undefined
  /**
   * Reuse only whole prefill chunks of the cached prefix: the rest is prefilled in the same batches
   * as a cold run, so probabilities are bit-identical to it when the kept part was prefilled too.
   */
  readonly reuseOnGrid?: boolean | undefined
  /** Sample under the grammar of this JSON schema (its JSON text): the output is one matching JSON value. */
  readonly jsonSchema?: string | undefined
}

/**
 * A generation's events. `Started` comes first; when the child fails before the first token was
 * delivered, the generation starts again on the replacement and `Started` (with that child's
 * reuse) comes once more, followed by its Prefilled and Token events from the beginning.
 */
export type GenerationEvent = AdvanceEvent | { readonly _tag: "Started"; readonly reusedTokens: number }

export type WorkerError = EngineError | EngineUnavailable

export class NativeWorker extends Context.Tag("nativegen/NativeWorker")<NativeWorker, {
  /** Streams a generation's steps: Started (with reused prompt tokens), Prefilled chunks, Tokens, Finished. */
  readonly generate: (request: GenerateRequest) => Stream.Stream<GenerationEvent, WorkerError | GenerationFailed>
  /**
   * Per head, each label's teacher-forced log-likelihood, probability and rank, from the decision
   * model. The prompt is prefilled in chunks of `prefillChunk` tokens, each a step of its own:
   * interrupting the call stops it at the next chunk. `onPrefilled` sees each chunk's progress.
   * Decisions run one at a time; a decision lost with its child is retried once on the replacement.
   */
  readonly score: (
    prompt: ReadonlyArray<number>,
    heads: ReadonlyArray<{ readonly name: string; readonly labels: ReadonlyArray<string> }>,
    onPrefilled?: (done: number, total: number) => Effect.Effect<void>
  ) => Effect.Effect<ReadonlyArray<HeadScore>, WorkerError>
  readonly tokenize: (role: Role, text: string, specialTokens?: boolean) => Effect.Effect<ReadonlyArray<number>, WorkerError>
  readonly detokenize: (role: Role, tokens: ReadonlyArray<number>) => Effect.Effect<string, WorkerError>
  /**
   * A chat as text through the role model's template, with or without the assistant prompt;
   * `enableThinking` is the template's `enable_thinking` (unset: the template's default).
   */
  readonly renderText: (
    role: Role,
    messages: ReadonlyArray<ChatMessage>,
    addGenerationPrompt: boolean,
    enableThinking?: boolean
  ) => Effect.Effect<string, WorkerError>
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
    enableThinking?: boolean
  ) => Effect.Effect<ReadonlyArray<number>, WorkerError>
  /** The native allocation plan of a model over candidate context sizes, without loading it. */
  readonly plan: Planner
  readonly readiness: Effect.Effect<WorkerReadiness>
  /** Readiness states as they change (the current one first). */
  readonly states: Stream.Stream<WorkerState>
  /** Asks for a repair now: a failed worker tries again at once; a ready one is left alone. */
  readonly repair: Effect.Effect<void>
}>() {}

/** One child and what was loaded into it. */
interface Incarnation {
  readonly number: number
  readonly child: EngineChild
  readonly scope: Scope.CloseableScope
  readonly hello: HelloInfo
  readonly models: ReadonlyArray<LoadedModel>
}

interface Status {
  readonly state: WorkerState
  readonly reason: string | undefined
  readonly current: Incarnation | undefined
}

/** Why a call did not complete on its child: the child is broken (repair) or gone. */
class ChildFailed extends Data.TaggedError("ChildFailed")<{
  readonly kind: RecoveryAction["kind"]
  readonly reason: string
  /** The role whose model the engine refused to load (kind `load`). */
  readonly role?: Role | undefined
}> {}

const isChildFailed = (e: unknown): e is ChildFailed => e instanceof ChildFailed

const isRpcClientError = (e: unknown): e is { readonly _tag: "RpcClientError"; readonly message: string } =>
  typeof e === "object" && e !== null && "_tag" in e && e._tag === "RpcClientError"

export const make = Effect.gen(function*() {
  const config = yield* NativeWorkerConfig
  const admission = yield* WorkerAdmission
  const resources = yield* ChildResources
  const workerScope = yield* Effect.scope
  // Every incarnation's scope is forked from this one, made now: a replacement child is then
  // stopped where the worker was built, after the services built on it (their finalizers use it).
  const childrenScope = yield* Scope.fork(workerScope, ExecutionStrategy.sequential)
  const status = yield* SubscriptionRef.make<Status>({ state: "starting", reason: undefined, current: undefined })
  const actions = yield* Ref.make<ReadonlyArray<RecoveryAction>>(config.recoveryActions ?? [])
  const loadFailure = yield* Ref.make<WorkerReadiness["loadFailure"]>(undefined)
  const failures = yield* Ref.make<ReadonlyArray<number>>([])
  const repairing = yield* Effect.makeSemaphore(1)
  const startedAt = yield* Clock.currentTimeMillis
  let incarnations = 0
  let backoffFiber: Fiber.RuntimeFiber<void> | undefined

  const setState = (state: WorkerState, reason?: string) =>
    SubscriptionRef.update(status, (s) => ({ ...s, state, reason }))

  const logAction = (action: Omit<RecoveryAction, "at">) =>
    Effect.flatMap(Clock.currentTimeMillis, (now) =>
      Ref.update(actions, (list) => [...list, { ...action, at: new Date(now) }].slice(-config.recoveryLogLength))
    )

  /**
   * Runs a call on a child with a progress deadline (none: the call has its own, per stream event);
   * transport failures, replies that fail their schema and hangs become ChildFailed.
   */
  const guarded = <A, E>(
    child: EngineChild,
    call: Effect.Effect<A, E>,
    deadline: Duration.Duration | undefined = config.stepDeadline
  ) => {
    // A call to a stuck child cannot be interrupted promptly (the interrupt waits on the child):
    // the deadline abandons it, and it ends when the child is stopped.
    // A call cut off by its connection closing (the broken child's client is being torn down)
    // ends as an interruption of the call alone: that is the child's failure, not the caller's.
    const disconnected = call.pipe(
      Effect.catchAllCause((cause): Effect.Effect<A, E | ChildFailed> =>
        Cause.isInterruptedOnly(cause)
          ? Effect.fail(new ChildFailed({ kind: "protocol", reason: "the engine connection closed during the call" }))
          : Effect.failCause(cause)
      ),
      Effect.disconnect
    )
    const bounded = deadline === undefined ? disconnected : Effect.timeoutFail(disconnected, {
      duration: deadline,
      onTimeout: () => new ChildFailed({ kind: "hang", reason: `no progress for ${Duration.format(deadline)}` })
    })
    return bounded.pipe(
      Effect.catchAll((e) => (isRpcClientError(e) ? childFailure(child, e.message) : Effect.fail(e))),
      Effect.catchSomeDefect((defect) => childDefect(child, defect))
    ) as Effect.Effect<A, Exclude<E, { readonly _tag: "RpcClientError" }> | ChildFailed>
  }

  /**
   * A defect of a call that is the child's fault: the RPC client dies on a socket write to a child
   * that is gone (EPIPE), and on a reply that fails its schema inside a valid frame.
   */
  const childDefect = (child: EngineChild, defect: unknown): Option.Option<Effect.Effect<never, ChildFailed>> =>
    Socket.isSocketError(defect)
      ? Option.some(childFailure(child, defect.message))
      : ParseResult.isParseError(defect)
      ? Option.some(Effect.fail(new ChildFailed({ kind: "protocol", reason: `a reply failed its schema: ${defect.message}` })))
      : Option.none()

  /**
   * A streamed call with the step deadline per event; transport failures, replies that fail their
   * schema and hangs go to `onChildFailed` (one handler on the stream: nothing more per event).
   */
  const guardedStream = <A, E, A2, E2>(
    child: EngineChild,
    stream: Stream.Stream<A, E>,
    onChildFailed: (failure: ChildFailed) => Stream.Stream<A2, E2>
  ): Stream.Stream<A | A2, Exclude<E, { readonly _tag: "RpcClientError" }> | E2> =>
    stream.pipe(
      Stream.catchSomeCause((cause) =>
        Cause.isInterruptedOnly(cause)
          ? Option.some(Stream.fail(new ChildFailed({ kind: "protocol", reason: "the engine connection closed mid-stream" })))
          : Option.map(Option.flatMap(Cause.dieOption(cause), (defect) => childDefect(child, defect)), Stream.fromEffect)
      ),
      Stream.timeoutFail(
        () => new ChildFailed({ kind: "hang", reason: `no step for ${Duration.format(config.stepDeadline)}` }),
        config.stepDeadline
      ),
      Stream.catchAll((e): Stream.Stream<A2, Exclude<E, { readonly _tag: "RpcClientError" }> | E2> =>
        isChildFailed(e)
          ? onChildFailed(e)
          : isRpcClientError(e)
          ? Stream.unwrap(Effect.map(Effect.flip(childFailure(child, e.message)), onChildFailed))
          : Stream.fail(e as Exclude<E, { readonly _tag: "RpcClientError" }>)
      )
    )

  /** A transport failure: the child's exit, when the process reports one promptly, else a protocol fault. */
  const childFailure = (child: EngineChild, message: string) =>
    Effect.flatMap(Effect.timeoutOption(child.exited, "250 millis"), (exit) =>
      Effect.fail(
        Option.isSome(exit)
          ? new ChildFailed({ kind: "exit", reason: `engine child ${child.pid} ${exit.value.description}` })
          : new ChildFailed({ kind: "protocol", reason: `protocol failure: ${message}` })
      )
    )

  /** Spawns, greets, loads and warms a child. Its scope is closed again if any step fails. */
  const startIncarnation = Effect.gen(function*() {
    const number = ++incarnations
    const scope = yield* Scope.fork(childrenScope, ExecutionStrategy.sequential)
    const started = Effect.gen(function*() {
      yield* setState("starting")
      yield* resources.acquire.pipe(
        Scope.extend(scope),
        Effect.mapError((e) => new ChildFailed({ kind: "start", reason: `cannot acquire child resources: ${e.message}` }))
      )
      const child = yield* spawn({
        settings: config.child,
        env: config.childEnv,
        incarnation: number,
        execPath: config.execPath,
        stopTimeout: config.stopTimeout
      }).pipe(
        Scope.extend(scope),
        Effect.mapError((e) => new ChildFailed({ kind: "start", reason: e.message }))
      )
      const hello = yield* guarded(child, child.client.Hello(), config.startDeadline)
      const contexts = yield* admission.admit(hello, planOn(child)).pipe(
        Scope.extend(scope),
        // A child that failed while planning is a child fault (restart); anything else is a refusal.
        Effect.mapError((e) => new ChildFailed({ kind: e._tag === "EngineUnavailable" ? "start" : "admission", reason: e.message }))
      )
      yield* setState("loading")
      const models: Array<LoadedModel> = []
      for (const role of ["generation", "decision"] as const) {
        const model = config.models[role]
        if (model === undefined) continue
        const before = yield* guarded(child, child.client.Memory())
        const loaded = yield* child.client.Load({
          role,
          modelPath: model.modelPath,
          contextSize: contexts[role] ?? model.contextSize,
          sequences: model.sequences ?? 1
        }).pipe(
          // The load deadline restarts with every progress event.
          Stream.timeoutFail(
            () => new ChildFailed({ kind: "hang", reason: `load of ${role} made no progress for ${Duration.format(config.loadDeadline)}` }),
            config.loadDeadline
          ),
          Stream.runFold(undefined as LoadedModel | undefined, (last, e) => (e._tag === "Loaded" ? e.model : last)),
          Effect.catchIf(isRpcClientError, (e) => childFailure(child, e.message)),
          // The engine answered with a typed refusal: the model, not the child, is at fault.
          Effect.mapError((e) => e._tag === "ChildFailed" ? e : new ChildFailed({ kind: "load", role, reason: `load of ${role} failed: ${e.message}` }))
        )
        if (loaded === undefined) {
          return yield* new ChildFailed({ kind: "start", reason: `load of ${role} ended without a model` })
        }
        models.push(loaded)
        yield* setState("warming")
        // Warm-up touches the role's buffers, so the growth measured after it is real allocation.
        yield* warm(child, loaded)
        const after = yield* guarded(child, child.client.Memory())
        yield* admission.measured(role, {
          rssBytes: after.rssBytes - before.rssBytes,
          vramBytes: after.vramUsedBytes - before.vramUsedBytes
        })
      }
      const incarnation: Incarnation = { number, child, scope, hello, models }
      // Watch the process: an exit while serving is a failure (stopping on purpose interrupts this first).
      yield* child.exited.pipe(
        Effect.flatMap((exit) =>
          onFailure(number, new ChildFailed({ kind: "exit", reason: `engine child ${child.pid} ${exit.description}` }))
        ),
        Effect.forkIn(scope)
      )
      return incarnation
    })
    return yield* started.pipe(
      // Whatever ends a start (a defect included) closes its scope and is a failed start, so the
      // restart loop always gets an answer.
      Effect.catchAllCause((cause) =>
        Effect.zipRight(
          Scope.close(scope, Exit.void),
          Cause.isInterruptedOnly(cause)
            ? Effect.interrupt
            : Effect.fail(Option.match(Cause.failureOption(cause), {
              onNone: () => new ChildFailed({ kind: "start", reason: `defect: ${Cause.pretty(cause)}` }),
              onSome: (e): ChildFailed => e
            }))
        )
      ),
      Effect.onInterrupt(() => Scope.close(scope, Exit.void))
    )
  })

  /** One tiny generation, or one score: proves a role works before the child takes requests. */
  const warm = (child: EngineChild, model: LoadedModel) =>
    Effect.gen(function*() {
      const prompt = yield* guarded(child, child.client.Render({ role: model.role, messages: [{ role: "user", content: "hi" }] }))
      if (model.role === "generation") {
        const generationId = `warm-${Crypto.randomUUID()}`
        yield* guarded(child, child.client.Begin({
          generationId,
          lane: "foreground",
          sequence: 0,
          prompt,
          sampling: { temperature: 0 },
          maxTokens: 1,
          stopTokens: [],
          prefillChunk: config.prefillChunk
        }))
        yield* guarded(child, Stream.runDrain(child.client.Advance({ generationId, fromIndex: 0 })))
        yield* guarded(child, child.client.End({ generationId }))
      } else {
        yield* guarded(child, Stream.runDrain(child.client.Score({
          prompt,
          heads: [{ name: "warm-up", labels: ["yes", "no"] }],
          prefillChunk: config.prefillChunk
        })))
      }
    }).pipe(
      Effect.catchIf(
        (e): e is Exclude<typeof e, ChildFailed> => e._tag !== "ChildFailed",
        (e) => Effect.fail(new ChildFailed({ kind: "start", reason: `warm-up of ${model.role} failed: ${e.message}` }))
      )
    )

  /** Plans on a child that is starting (it is not `ready` yet, so `plan` cannot be used). */
  const planOn = (child: EngineChild): Planner => (modelPath, contextSizes, sequences) =>
    unavailable(guarded(child, child.client.Plan({ modelPath, contextSizes, sequences })))

  /**
   * Stops an incarnation. A broken child goes straight to SIGTERM/SIGKILL and its exit is observed
   * before its scope (client, leases) closes: nothing it held is released while it may still run.
   */
  const retire = (incarnation: Incarnation, broken: boolean) =>
    Effect.zipRight(broken ? incarnation.child.terminate : Effect.void, Scope.close(incarnation.scope, Exit.void))

  /**
   * Brings up a replacement, counting each failed start against the restart budget, until one is
   * ready or the budget is exhausted (then `failed`, and a retry after the backoff).
   */
  const restartLoop = (cause: ChildFailed): Effect.Effect<void> =>
    Effect.gen(function*() {
      let last = cause
      for (;;) {
        const now = yield* Clock.currentTimeMillis
        const budget = { intensity: config.restartIntensity, periodMillis: Duration.toMillis(config.restartPeriod) }
        const history = yield* Ref.updateAndGet(failures, (h) => recordFailure(h, now, budget))
        if (isExhausted(history, now, budget)) {
          const reason = `restart budget exhausted (${history.length} failures within ${Duration.format(config.restartPeriod)}); last: ${last.reason}`
          yield* SubscriptionRef.set(status, { state: "failed", reason, current: undefined })
          yield* logAction({ kind: "budget", reason, outcome: "gave-up" })
          yield* Effect.logError(reason)
          backoffFiber = yield* Effect.sleep(config.restartBackoff).pipe(
            Effect.zipRight(repairDetached("backoff expired")),
            Effect.forkIn(workerScope)
          )
          return
        }
        if (last.kind === "admission" || last.kind === "load") {
          // Admission and a model's refusal to load are deterministic: restarting would only repeat
          // them. repair() tries again.
          if (last.role !== undefined) yield* Ref.set(loadFailure, { role: last.role, reason: last.reason })
          yield* SubscriptionRef.set(status, { state: "failed", reason: last.reason, current: undefined })
          yield* logAction({ kind: last.kind, reason: last.reason, outcome: "gave-up" })
          yield* Effect.logError(last.reason)
          return
        }
        yield* setState("repairing", last.reason)
        const next = yield* Effect.either(startIncarnation)
        if (next._tag === "Right") {
          yield* Ref.set(loadFailure, undefined)
          yield* SubscriptionRef.set(status, { state: "ready", reason: undefined, current: next.right })
          yield* logAction({ kind: last.kind, reason: last.reason, outcome: "replaced" })
          return
        }
        yield* logAction({ kind: last.kind, reason: last.reason, outcome: "failed" })
        last = next.left
      }
    })

  /** Reports a failure of incarnation `number`; the first report repairs it, later ones find it done. */
  const onFailure = (number: number, failure: ChildFailed) =>
    Effect.gen(function*() {
      // Taken out of service at once (not in the forked repair): a caller that retries after this
      // returns waits for the replacement instead of finding the broken child still `ready`.
      const broken = yield* SubscriptionRef.modify(status, (s): [Incarnation | undefined, Status] =>
        s.current !== undefined && s.current.number === number
          ? [s.current, { state: "repairing", reason: failure.reason, current: undefined }]
          : [undefined, s]
      )
      if (broken === undefined) return
      yield* repairing.withPermits(1)(
        Effect.gen(function*() {
          yield* Effect.logWarning(`engine child ${broken.child.pid} failed (${failure.kind}): ${failure.reason}`)
          yield* retire(broken, true)
          yield* restartLoop(failure)
        })
      ).pipe(Effect.forkIn(workerScope))
    })

  const repairNow = (why: string) =>
    repairing.withPermits(1)(
      Effect.gen(function*() {
        const s = yield* SubscriptionRef.get(status)
        if (s.state !== "failed") return
        yield* Ref.set(failures, [])
        yield* logAction({ kind: "repair-request", reason: why, outcome: "pending" })
        yield* restartLoop(new ChildFailed({ kind: "repair-request", reason: why }))
      })
    )

  /**
   * A repair of a failed worker, run to its end in the worker's scope: whoever asked for it only
   * waits, so interrupting them (or the backoff timer) never stops a repair halfway, and the
   * state always ends `ready` or `failed`.
   */
  const repairDetached = (why: string) => Effect.flatMap(Effect.forkIn(repairNow(why), workerScope), Fiber.join)

  /** The ready incarnation, waiting (bounded) while the engine starts or repairs. */
  const ready: Effect.Effect<Incarnation, EngineUnavailable> = status.changes.pipe(
    Stream.filter((s) => s.state === "ready" || s.state === "failed" || s.state === "stopped"),
    Stream.runHead,
    Effect.flatMap((s) =>
      Option.isSome(s) && s.value.state === "ready" && s.value.current !== undefined
        ? Effect.succeed(s.value.current)
        : Effect.fail(new EngineUnavailable({ reason: Option.match(s, { onNone: () => "stopped", onSome: (v) => v.reason ?? v.state }) }))
    ),
    Effect.timeoutFail({
      duration: config.readyTimeout,
      onTimeout: () => new EngineUnavailable({ reason: `no ready engine within ${Duration.format(config.readyTimeout)}` })
    })
  )

  /** Runs a call on the ready child; a child failure is reported (repair) and surfaces as ChildFailed. */
  const onReady = <A, E>(
    call: (incarnation: Incarnation) => Effect.Effect<A, E>,
    deadline: Duration.Duration | undefined = config.stepDeadline
  ) =>
    Effect.flatMap(ready, (incarnation) =>
      guarded(incarnation.child, call(incarnation), deadline).pipe(
        Effect.tapError((e) => (isChildFailed(e) ? onFailure(incarnation.number, e) : Effect.void))
      )
    )

  const unavailable = <A, E>(self: Effect.Effect<A, E | ChildFailed>) =>
    Effect.catchIf(
      self,
      isChildFailed,
      (e) => Effect.fail(new EngineUnavailable({ reason: e.reason }))
    ) as Effect.Effect<A, Exclude<E, ChildFailed> | EngineUnavailable>

  /**
   * Idempotent calls (and a generation's Begin, before anything was delivered) that were lost with
   * their child are retried once on the replacement: a request that arrives just as the child dies,
   * before the worker has noticed, waits for the repair instead of failing.
   */
  const retryOnce = <A, E>(self: Effect.Effect<A, E | ChildFailed>) => Effect.catchIf(self, isChildFailed, () => self)

  const call = <A, E>(f: (incarnation: Incarnation) => Effect.Effect<A, E>) => unavailable(retryOnce(onReady(f)))

  /** Whether an incarnation is still the one serving (not replaced, not being repaired). */
  const isCurrent = (incarnation: Incarnation) =>
    Effect.map(SubscriptionRef.get(status), (s) => s.current?.number === incarnation.number)

  const generate = (request: GenerateRequest) => generation(request, true)

  /**
   * One attempt at a generation. A child failure before the first token reached the caller starts
   * it again on the replacement (`mayRetry`, once); after that the stream fails with
   * GenerationFailed, so no token is ever delivered twice.
   */
  const generation = (
    request: GenerateRequest,
    mayRetry: boolean
  ): Stream.Stream<GenerationEvent, WorkerError | GenerationFailed> =>
    Stream.unwrapScoped(
      Effect.gen(function*() {
        const generationId = Crypto.randomUUID()
        // End is registered before Begin is sent: a caller interrupted while Begin is in flight
        // still ends it (the child remembers an End that overtakes its Begin). A child that was
        // replaced meanwhile took the generation with it.
        let begunOn: Incarnation | undefined
        yield* Effect.addFinalizer(() =>
          Effect.suspend(() => {
            const incarnation = begunOn
            if (incarnation === undefined) return Effect.void
            return Effect.flatMap(isCurrent(incarnation), (current) =>
              current ? Effect.ignore(guarded(incarnation.child, incarnation.child.client.End({ generationId }))) : Effect.void
            )
          })
        )
        const { incarnation, reusedTokens } = yield* unavailable(retryOnce(onReady((incarnation) =>
          Effect.zipRight(
            Effect.sync(() => {
              begunOn = incarnation
            }),
            incarnation.child.client.Begin({
              generationId,
              lane: request.lane ?? "foreground",
              sequence: request.sequence ?? 0,
              prompt: request.prompt,
              sampling: request.sampling,
              maxTokens: request.maxTokens,
              stopTokens: request.stopTokens ?? [],
              prefillChunk: config.prefillChunk,
              prefillOnly: request.prefillOnly,
              confidence: request.confidence,
              reuseOnGrid: request.reuseOnGrid,
              jsonSchema: request.jsonSchema
            }).pipe(Effect.map(({ reusedTokens }) => ({ incarnation, reusedTokens })))
          )
        )))
        let delivered = 0
        const steps = guardedStream(
          incarnation.child,
          incarnation.child.client.Advance({ generationId, fromIndex: 0 }),
          (failure): Stream.Stream<GenerationEvent, WorkerError | GenerationFailed> => {
            const repair = onFailure(incarnation.number, failure)
            // Nothing reached the caller yet: start again on the replacement (which waits for it).
            if (mayRetry && delivered === 0) return Stream.unwrap(Effect.as(repair, generation(request, false)))
            return Stream.fromEffect(
              Effect.zipRight(repair, Effect.fail(new GenerationFailed({ deliveredTokens: delivered, reason: failure.reason })))
            )
          }
        ).pipe(
          Stream.tap((e) =>
            Effect.sync(() => {
              if (e._tag === "Token") delivered++
            })
          )
        )
        return Stream.concat(Stream.make<Array<GenerationEvent>>({ _tag: "Started", reusedTokens }), steps)
      })
    )

  /** One decision at a time per child (its decision sequence); the step deadline runs per prompt chunk. */
  const scoring = yield* Effect.makeSemaphore(1)

  const score: NativeWorker["Type"]["score"] = (prompt, heads, onPrefilled) => {
    const scoreOn = (incarnation: Incarnation) =>
      guardedStream(
        incarnation.child,
        incarnation.child.client.Score({ prompt, heads, prefillChunk: config.prefillChunk }),
        (failure) => Stream.fail(failure)
      ).pipe(
        Stream.runFoldEffect(undefined as ReadonlyArray<HeadScore> | undefined, (result, event) =>
          event._tag === "Scored"
            ? Effect.succeed(event.heads)
            : Effect.as(onPrefilled === undefined ? Effect.void : onPrefilled(event.done, event.total), result)),
        Effect.flatMap((result) =>
          result === undefined
            ? Effect.fail(new ChildFailed({ kind: "protocol", reason: "a score ended without its result" }))
            : Effect.succeed(result)
        )
      )
    // Scoring is idempotent: a score lost with its child is retried once on the replacement.
    return scoring.withPermits(1)(unavailable(retryOnce(onReady(scoreOn, undefined))))
  }

  const readiness = Effect.gen(function*() {
    const s = yield* SubscriptionRef.get(status)
    const now = yield* Clock.currentTimeMillis
    const models = s.current?.models ?? []
    return {
      state: s.state,
      reason: s.reason,
      incarnation: s.current?.number ?? incarnations,
      pid: s.current?.child.pid,
      backend: s.current?.hello.backend,
      devices: s.current?.hello.devices ?? [],
      hello: s.current?.hello,
      models,
      roles: (["generation", "decision"] as const).flatMap((role) => {
        const model = config.models[role]
        return model === undefined ? [] : [{
          role,
          modelPath: model.modelPath,
          revision: model.revision,
          admittedContext: models.find((m) => m.role === role)?.contextSize
        }]
      }),
      uptimeMillis: now - startedAt,
      recoveryActions: yield* Ref.get(actions),
      loadFailure: yield* Ref.get(loadFailure)
    } satisfies WorkerReadiness
  })

  // The first start counts against the budget like any other.
  yield* Effect.addFinalizer(() => SubscriptionRef.update(status, (s) => ({ ...s, state: "stopped" as const, current: undefined })))
  const first = yield* Effect.either(startIncarnation)
  if (first._tag === "Right") yield* SubscriptionRef.set(status, { state: "ready", reason: undefined, current: first.right })
  else yield* repairing.withPermits(1)(restartLoop(first.left))

  // Idle heartbeat: a child that stops answering while nobody calls it is found all the same.
  yield* Effect.gen(function*() {
    const s = yield* SubscriptionRef.get(status)
    if (s.state !== "ready" || s.current === undefined) return
    const current = s.current
    yield* guarded(current.child, current.child.client.Hello()).pipe(
      Effect.catchAll((e) => (e._tag === "ChildFailed" ? onFailure(current.number, e) : Effect.void))
    )
  }).pipe(
    Effect.zipRight(Effect.sleep(config.heartbeatInterval)),
    Effect.forever,
    Effect.forkIn(workerScope)
  )

  return NativeWorker.of({
    generate,
    score,
    tokenize: (role, text, specialTokens = false) =>
      call((i) => i.child.client.Tokenize({ role, text, specialTokens })),
    detokenize: (role, tokens) => call((i) => i.child.client.Detokenize({ role, tokens })),
    render: (role, messages, addGenerationPrompt, enableThinking) =>
      call((i) => i.child.client.Render({ role, messages, addGenerationPrompt, enableThinking })),
    renderText: (role, messages, addGenerationPrompt, enableThinking) =>
      call((i) => i.child.client.RenderText({ role, messages, addGenerationPrompt, enableThinking })),
    // Not retried: a state lives in one child; the caller decides what a lost save means.
    saveState: (sequence, path) =>
      unavailable(onReady((i) =>
        Effect.map(i.child.client.SaveState({ sequence, path }), (r) => ({ ...r, incarnation: i.number }))
      )),
    restoreState: (sequence, path) => unavailable(onReady((i) => i.child.client.RestoreState({ sequence, path }))),
    plan: (modelPath, contextSizes, sequences) => call((i) => i.child.client.Plan({ modelPath, contextSizes, sequences })),
    readiness,
    states: Stream.changes(Stream.map(status.changes, (s) => s.state)),
    repair: Effect.zipRight(
      Effect.suspend(() => (backoffFiber === undefined ? Effect.void : Fiber.interrupt(backoffFiber))),
      repairDetached("explicit repair request")
    )
  })
})

export const layer: Layer.Layer<NativeWorker, never, NativeWorkerConfig | WorkerAdmission | ChildResources> = Layer.scoped(
  NativeWorker,
  make
)
