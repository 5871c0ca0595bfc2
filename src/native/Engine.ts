/**
 * The engine: everything the child does with node-llama-cpp, as one service. Runs only inside an
 * engine child process (the host never imports it). Built in a scope from modules of one concept
 * each (engine/): the llama binding and its step gate, the inventory, memory plans, resident
 * models, chat templates, generations, state files and decision scoring. Closing the scope ends
 * every open generation, disposes every resident model and context, then the llama itself.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import type * as Stream from "effect/Stream"
import * as Continuation from "../domain/Continuation.js"
import type { EngineError, EngineFailure, RoleNotLoaded } from "../domain/EngineError.js"
import * as Generation from "./engine/Generation.js"
import * as Inventory from "./engine/Inventory.js"
import * as Llama from "./engine/Llama.js"
import * as Planning from "./engine/Planning.js"
import * as Residents from "./engine/Residents.js"
import * as Scoring from "./engine/Scoring.js"
import * as StateFiles from "./engine/StateFiles.js"
import * as Templates from "./engine/Templates.js"
import type { FaultHooks } from "./engine/Faults.js"
import type { ChatMessage, HelloInfo, LoadEvent, MemoryReading, ModelPlan, Role, TemplateInputs } from "./Protocol.js"

export type { BeginRequest } from "./Protocol.js"
export type { FaultHooks } from "./engine/Faults.js"
export type { EngineOptions } from "./engine/Llama.js"

export class Engine extends Context.Tag("nativegen/Engine")<Engine, {
  readonly hello: Effect.Effect<HelloInfo>
  /** The child's RSS and used VRAM, read now. */
  readonly memory: Effect.Effect<MemoryReading>
  /** The model's weights and a context at each size, as llama.cpp estimates them, without loading. */
  readonly plan: (modelPath: string, contextSizes: ReadonlyArray<number>, sequences: number) => Effect.Effect<ModelPlan, EngineError>
  /** Loads a role's model (replacing its previous one): progress, then the loaded model. */
  readonly load: (role: Role, modelPath: string, contextSize: number, sequences: number) => Stream.Stream<LoadEvent, EngineError>
  readonly unload: (role: Role) => Effect.Effect<void, EngineFailure>
  readonly tokenize: (role: Role, text: string, specialTokens: boolean) => Effect.Effect<ReadonlyArray<number>, RoleNotLoaded>
  readonly detokenize: (role: Role, tokens: ReadonlyArray<number>) => Effect.Effect<string, RoleNotLoaded>
  /** A chat through the model's own template, as tokens; default: ending with the assistant prompt. */
  readonly render: (
    role: Role,
    messages: ReadonlyArray<ChatMessage>,
    addGenerationPrompt?: boolean,
    inputs?: TemplateInputs
  ) => Effect.Effect<ReadonlyArray<number>, EngineError>
  /** A chat through the model's own template, as text. */
  readonly renderText: (
    role: Role,
    messages: ReadonlyArray<ChatMessage>,
    addGenerationPrompt: boolean,
    inputs?: TemplateInputs
  ) => Effect.Effect<string, EngineError>
  /** A continued turn's new tokens after the held ones, or why the template does not allow it (Protocol: RenderContinuation). */
  readonly renderContinuation: (
    role: Role,
    history: ReadonlyArray<ChatMessage>,
    turn: ReadonlyArray<ChatMessage>,
    inputs: TemplateInputs,
    turnInputs: TemplateInputs
  ) => Effect.Effect<{ readonly tokens: ReadonlyArray<number> } | { readonly refused: string }, EngineError>
  readonly saveState: StateFiles.StateFiles["save"]
  readonly restoreState: StateFiles.StateFiles["restore"]
  readonly begin: Generation.Generations["begin"]
  readonly start: Generation.Generations["start"]
  readonly advance: Generation.Generations["advance"]
  readonly end: Generation.Generations["end"]
  readonly endNow: Generation.Generations["endNow"]
  readonly score: Scoring.Scoring["score"]
}>() {}

/** Builds the engine in the current scope; `faults` carries test failpoints (none in production). */
export const make = Effect.fn("Engine.make")(function*(
  options: Llama.EngineOptions,
  faults?: FaultHooks
): Effect.fn.Return<Engine["Type"], EngineFailure, Scope.Scope> {
  const failpoints = faults?.failpoints
  // Acquired in this order, released in reverse: generations end before models are disposed,
  // models before the llama.
  const native = yield* Llama.make(options)
  const residents = yield* Residents.make(native, failpoints)
  const generations = yield* Generation.make(native, residents, faults)
  const inventory = Inventory.make(native)
  const stateFiles = StateFiles.make(native, generations)
  const scoring = yield* Scoring.make(native, residents, failpoints)
  return Engine.of({
    hello: inventory.hello,
    memory: inventory.memory,
    plan: (modelPath, contextSizes, sequences) => Planning.plan(native, modelPath, contextSizes, sequences),
    load: residents.load,
    unload: residents.unload,
    tokenize: residents.tokenize,
    detokenize: residents.detokenize,
    render: (role, messages, addGenerationPrompt = true, inputs) =>
      Effect.flatMap(residents.resident(role), (r) => Templates.render(role, r, messages, addGenerationPrompt, inputs)),
    renderText: (role, messages, addGenerationPrompt, inputs) =>
      Effect.flatMap(residents.resident(role), (r) => Templates.renderText(role, r, messages, addGenerationPrompt, inputs)),
    renderContinuation: (role, history, turn, inputs, turnInputs) =>
      Effect.flatMap(residents.resident(role), (r) =>
        Effect.gen(function*() {
          const text = (messages: ReadonlyArray<ChatMessage>, addGenerationPrompt: boolean, i: TemplateInputs) =>
            Templates.renderText(role, r, messages, addGenerationPrompt, i)
          const tokenize = (t: string) => residents.tokenize(role, t, true)
          const parts = Continuation.continuationTexts({
            assistantPrompt: yield* text(history.slice(0, -1), true, inputs),
            history: yield* text(history, false, inputs),
            // Only the new turn's assistant prompt depends on the response format's thinking rule.
            full: yield* text([...history, ...turn], true, turnInputs)
          }, history[history.length - 1]!.content)
          if (typeof parts === "string") {
            // The template re-renders the assistant message (Qwen3 does, for a turn of tool calls after
            // the last user message): what follows a probe standing in for the whole message is new.
            const probed = Continuation.afterProbe(yield* text(Continuation.probeChat(history, turn), true, turnInputs))
            return probed === undefined ? { refused: parts } : { tokens: yield* tokenize(probed) }
          }
          return { tokens: [...(yield* tokenize(parts.closing)), ...(yield* tokenize(parts.turn))] }
        })),
    saveState: stateFiles.save,
    restoreState: stateFiles.restore,
    begin: generations.begin,
    start: generations.start,
    advance: generations.advance,
    end: generations.end,
    endNow: generations.endNow,
    score: scoring.score
  })
})

/** The engine for the layer's life: its native resources are disposed when the layer is released. */
export const layer = (options: Llama.EngineOptions, faults?: FaultHooks): Layer.Layer<Engine, EngineFailure> =>
  Layer.scoped(Engine, make(options, faults))
