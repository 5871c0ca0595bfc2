/**
 * The models resident in the engine, one per role: loading a role's model and context (streaming
 * load progress, then the loaded model with its measured memory), unloading it, and its
 * tokenizer. A load replaces the role's previous model. Each model and context is disposed when it
 * is unloaded or replaced, and every resident one when the engine's scope closes.
 */
import * as Effect from "effect/Effect"
import * as Mailbox from "effect/Mailbox"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import type { LlamaContext, LlamaContextSequence, LlamaModel, Token } from "node-llama-cpp"
import { type EngineError, type EngineFailure, ModelLoadFailed, RoleNotLoaded } from "../../domain/EngineError.js"
import type { Failpoints } from "../Failpoints.js"
import { type LoadEvent, LoadedModel, type Role, SpecialTokens } from "../Protocol.js"
import { checkPositiveInt } from "./Checks.js"
import type { Native } from "./Llama.js"
import { takeInsights } from "./Planning.js"
import { type ChatTemplate, parseTemplate } from "./Templates.js"

export interface Resident {
  readonly model: LlamaModel
  readonly context: LlamaContext
  readonly sequences: ReadonlyArray<LlamaContextSequence>
  readonly modelPath: string
  readonly template: ChatTemplate | undefined
  readonly vocabularySize: number
}

export interface Residents {
  /** The role's resident model, or `RoleNotLoaded`. */
  readonly resident: (role: Role) => Effect.Effect<Resident, RoleNotLoaded>
  /** Loads a role's model and context (replacing its previous one), streaming load progress, then the loaded model. */
  readonly load: (role: Role, modelPath: string, contextSize: number, sequences: number) => Stream.Stream<LoadEvent, EngineError>
  /** Disposes the role's context and model; nothing when none is loaded. */
  readonly unload: (role: Role) => Effect.Effect<void, EngineFailure>
  /** Calls `listener` with each resident as it leaves (before its native resources are disposed). */
  readonly onUnload: (listener: (resident: Resident) => void) => void
  readonly tokenize: (role: Role, text: string, specialTokens: boolean) => Effect.Effect<ReadonlyArray<number>, RoleNotLoaded>
  readonly detokenize: (role: Role, tokens: ReadonlyArray<number>) => Effect.Effect<string, RoleNotLoaded>
}

/**
 * The model's single-token id for a marker text, or null where the text is not one added token: a
 * control token, or a user-defined one (Qwen3's `<think>` and `<tool_call>` are added tokens that
 * are not special, so they detokenize as their text).
 */
const specialToken = (model: LlamaModel, text: string): number | null => {
  const tokens = model.tokenize(text, true)
  if (tokens.length !== 1) return null
  const attributes = model.getTokenAttributes(tokens[0]!)
  return attributes.control || attributes.userDefined ? tokens[0]! : null
}

export const make = (native: Native, failpoints: Failpoints | undefined): Effect.Effect<Residents, never, Scope.Scope> =>
  Effect.gen(function*() {
    const { llama, options, step } = native
    const residents = new Map<Role, Resident>()
    const listeners: Array<(resident: Resident) => void> = []

    const resident = (role: Role) =>
      Effect.suspend(() => {
        const r = residents.get(role)
        return r === undefined ? Effect.fail(new RoleNotLoaded({ role })) : Effect.succeed(r)
      })

    const unload = (role: Role) =>
      Effect.gen(function*() {
        const r = residents.get(role)
        if (r === undefined) return
        residents.delete(role)
        for (const listener of listeners) listener(r)
        yield* step("unload", async () => {
          await r.context.dispose()
          await r.model.dispose()
        })
      })

    const load = (role: Role, modelPath: string, contextSize: number, sequences: number): Stream.Stream<LoadEvent, EngineError> =>
      Stream.unwrapScoped(
        Effect.gen(function*() {
          yield* checkPositiveInt("contextSize", contextSize)
          yield* checkPositiveInt("sequences", sequences)
          if (failpoints?.crashDuringLoad === true) process.kill(process.pid, "SIGKILL")
          if (failpoints?.hangDuringLoad === true) return yield* Effect.never
          const insights = yield* takeInsights(native, modelPath)
          yield* unload(role)
          const progress = yield* Mailbox.make<LoadEvent, EngineError>()
          const loading = step("load", async () => {
            for (let i = 0; i < (failpoints?.slowLoadSteps ?? 0); i++) {
              progress.unsafeOffer({ _tag: "LoadProgress", fraction: 0 })
              await new Promise((resolve) => setTimeout(resolve, 200))
            }
            const model = await llama.loadModel({
              modelPath,
              gpuLayers: native.gpuLayers === 0 ? 0 : "max",
              onLoadProgress: (fraction) => progress.unsafeOffer({ _tag: "LoadProgress", fraction })
            })
            try {
              const context = await model.createContext({
                contextSize,
                sequences,
                threads: native.threads,
                batchSize: Math.min(options.batchSize, contextSize),
                batching: native.batching
              })
              return { model, context }
            } catch (cause) {
              await model.dispose()
              throw cause
            }
          }).pipe(
            Effect.mapError((e) => new ModelLoadFailed({ modelPath, reason: e.reason })),
            Effect.map(({ context, model }) => {
              const chatTemplate = insights.ggufFileInfo.metadata.tokenizer?.chat_template
              residents.set(role, {
                model,
                context,
                sequences: Array.from({ length: sequences }, () => context.getSequence()),
                modelPath,
                template: parseTemplate(chatTemplate),
                vocabularySize: insights.ggufFileInfo.metadata.tokenizer?.ggml?.tokens?.length ?? 0
              })
              return new LoadedModel({
                role,
                modelPath,
                contextSize: context.contextSize,
                sequences,
                trainedContextSize: model.trainContextSize,
                measured: {
                  modelBytes: model.memoryUsage.ram + model.memoryUsage.vram,
                  contextBytes: context.memoryUsage.ram + context.memoryUsage.vram
                },
                specialTokens: new SpecialTokens({
                  bos: model.tokens.bos,
                  eos: model.tokens.eos,
                  thinkOpen: specialToken(model, "<think>"),
                  thinkClose: specialToken(model, "</think>"),
                  toolOpen: specialToken(model, "<tool_call>"),
                  toolClose: specialToken(model, "</tool_call>")
                })
              })
            }),
            Effect.flatMap((model) => progress.offer({ _tag: "Loaded", model })),
            Effect.zipRight(progress.end),
            Effect.catchAll((e) => progress.fail(e))
          )
          yield* Effect.forkScoped(loading)
          return Mailbox.toStream(progress)
        })
      )

    yield* Effect.addFinalizer(() =>
      Effect.forEach(Array.from(residents.keys()), (role) => Effect.ignore(unload(role)), { discard: true })
    )

    return {
      resident,
      load,
      unload,
      onUnload: (listener) => void listeners.push(listener),
      tokenize: (role, text, specialTokens) =>
        Effect.map(resident(role), (r) => r.model.tokenize(text, specialTokens) as ReadonlyArray<number>),
      detokenize: (role, tokens) => Effect.map(resident(role), (r) => r.model.detokenize(tokens as Array<Token>, false))
    }
  })
