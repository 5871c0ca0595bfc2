/**
 * @effect/ai's `LanguageModel` over a nativegen `Provider`: embedded (over `Runtime.layer`) or
 * remote (over `Client.layer`) alike. `layer(config?)` provides it, `model(config?)` is an
 * @effect/ai `Model`; per call, `withConfigOverride` sets the generation options (max tokens,
 * sampling, stop strings, lane, conversation, checkpoint, thinking). `generateObject`'s schema is
 * sent as the request's JSON-schema response format: the engine decodes under its grammar, so the
 * answer is JSON of that shape whatever the model's weights (a schema the grammar cannot express
 * is refused as `MalformedInput`). See `Parts.ts` for how a generation
 * becomes response parts and `Errors.ts` for how failures become `AiError`s.
 *
 * A conversation (`conversation` in the config) continues from its cache by itself: after each
 * turn the layer keeps the turn's checkpoint with the chat it covers, and a later call of that
 * conversation whose history (through its last assistant message) is exactly that chat is sent
 * with the checkpoint, so only the new turn is prefilled (reuse kind `continuation`). Any other
 * history is sent without one (the runtime reuses the longest cached prefix), and a kept
 * checkpoint the runtime no longer honours is dropped and the call sent again without it.
 * Decisions, preparation and readiness stay on the `Provider`.
 */
import * as AiError from "@effect/ai/AiError"
import * as LanguageModel from "@effect/ai/LanguageModel"
import * as AiModel from "@effect/ai/Model"
import type * as Response from "@effect/ai/Response"
import * as Telemetry from "@effect/ai/Telemetry"
import * as Tool from "@effect/ai/Tool"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import { dual } from "effect/Function"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import type { ChatMessage, Checkpoint, GenerateChunk, GenerateRequest, GenerationLane, Sampling, ToolDefinition } from "../domain/Inference.js"
import { Provider } from "../services/Provider.js"
import type { ProviderError } from "../services/ProviderError.js"
import { toAiError } from "./Errors.js"
import * as Messages from "./Messages.js"
import { finishReason, streamState, wholeParts } from "./Parts.js"

export type { NativegenMetadata } from "./Parts.js"

/** Generation options, from the layer's config and each call's overrides. */
export class Config extends Context.Tag("nativegen/ai/NativegenLanguageModel/Config")<Config, Config.Service>() {}

export declare namespace Config {
  export interface Service {
    /** Most tokens to generate. Default: 1024 (prompt and max tokens must fit the admitted context). */
    readonly maxTokens?: number | undefined
    /** Default: greedy (`{ temperature: 0 }`). */
    readonly sampling?: Sampling | undefined
    /** The answer stops before any of these strings. */
    readonly stop?: ReadonlyArray<string> | undefined
    /** Default: `foreground`. */
    readonly lane?: GenerationLane | undefined
    /** Turns of one conversation share a sequence and its cache. */
    readonly conversation?: string | undefined
    /** Continue from this checkpoint instead of the one the layer kept for the conversation. */
    readonly checkpoint?: Checkpoint | undefined
    /** False asks the template to skip thinking (Qwen3's `enable_thinking`). Default: the template's. */
    readonly thinking?: boolean | undefined
  }
}

export const defaultMaxTokens = 1024

/** How many conversations' last checkpoints a layer keeps (the oldest is forgotten first). */
const keptConversations = 1024

/** Runs `self` with `overrides` over the config in scope (the layer's config still applies beneath). */
export const withConfigOverride: {
  (overrides: Config.Service): <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
  <A, E, R>(self: Effect.Effect<A, E, R>, overrides: Config.Service): Effect.Effect<A, E, R>
} = dual(2, <A, E, R>(self: Effect.Effect<A, E, R>, overrides: Config.Service): Effect.Effect<A, E, R> =>
  Effect.flatMap(
    Effect.serviceOption(Config),
    (config) => Effect.provideService(self, Config, { ...Option.getOrUndefined(config), ...overrides })
  ))

/** A conversation's last turn: its checkpoint and the chat it covers (as JSON, to compare). */
interface Kept {
  readonly checkpoint: Checkpoint
  readonly chat: string
}

const chatKey = (messages: ReadonlyArray<ChatMessage>) => JSON.stringify(messages)

/** The messages through the last assistant message. */
const historyOf = (messages: ReadonlyArray<ChatMessage>) => messages.slice(0, messages.findLastIndex((m) => m.role === "assistant") + 1)

const module = "NativegenLanguageModel"

/**
 * The request's tools, for the template: none when the tool choice is `none`. nativegen does not
 * force a call, so a choice that requires one is refused rather than ignored; a provider-defined
 * tool (another provider's) is refused too.
 */
const toolsOf = (options: LanguageModel.ProviderOptions, method: string): Effect.Effect<Array<ToolDefinition>, AiError.MalformedInput> => {
  const choice = options.toolChoice
  if (options.tools.length === 0 || choice === "none") return Effect.succeed([])
  const refuse = (description: string) => Effect.fail(new AiError.MalformedInput({ module, method, description }))
  if (choice === "required" || (typeof choice === "object" && ("tool" in choice || choice.mode === "required"))) {
    return refuse(`nativegen does not force a tool call (tool choice ${JSON.stringify(choice)}); use "auto"`)
  }
  const tools: Array<ToolDefinition> = []
  for (const tool of options.tools) {
    if (!Tool.isUserDefined(tool)) return refuse(`tool ${tool.name} is another provider's tool`)
    tools.push({
      name: tool.name,
      ...(tool.description === undefined ? {} : { description: tool.description }),
      parameters: { ...Tool.getJsonSchemaFromSchemaAst(tool.parametersSchema.ast) }
    })
  }
  return Effect.succeed(tools)
}

export const make = Effect.fn("NativegenLanguageModel.make")(function*(config: Config.Service = {}) {
  const provider = yield* Provider
  const kept = new Map<string, Kept>()

  const keep = (conversation: string, checkpoint: Checkpoint, chat: ReadonlyArray<ChatMessage>) => {
    kept.delete(conversation)
    kept.set(conversation, { checkpoint, chat: chatKey(chat) })
    if (kept.size > keptConversations) kept.delete(kept.keys().next().value!)
  }

  /** The request for `options`, and whether its checkpoint is one the layer kept. */
  const requestOf = (options: LanguageModel.ProviderOptions, method: string) =>
    Effect.gen(function*() {
      const settings = { ...config, ...Option.getOrUndefined(yield* Effect.serviceOption(Config)) }
      const tools = yield* toolsOf(options, method)
      const messages = yield* Messages.fromPrompt(options.prompt, { module, method })
      const conversation = settings.conversation
      const held = conversation === undefined || settings.checkpoint !== undefined ? undefined : kept.get(conversation)
      const resumed = held !== undefined && held.chat === chatKey(historyOf(messages)) ? held.checkpoint : undefined
      const checkpoint = settings.checkpoint ?? resumed
      const request: GenerateRequest = {
        messages,
        maxTokens: settings.maxTokens ?? defaultMaxTokens,
        sampling: settings.sampling ?? { temperature: 0 },
        lane: settings.lane ?? "foreground",
        ...(settings.stop === undefined ? {} : { stop: settings.stop }),
        ...(settings.thinking === undefined ? {} : { thinking: settings.thinking }),
        ...(tools.length === 0 ? {} : { tools }),
        ...(options.responseFormat.type === "json"
          ? { responseFormat: { type: "jsonSchema", schema: { ...Tool.getJsonSchemaFromSchemaAst(options.responseFormat.schema.ast) } } }
          : {}),
        ...(conversation === undefined ? {} : { conversation }),
        ...(checkpoint === undefined ? {} : { checkpoint })
      }
      Telemetry.addGenAIAnnotations(options.span, {
        system: "nativegen",
        operation: { name: "chat" },
        request: {
          maxTokens: request.maxTokens,
          temperature: request.sampling?.temperature,
          topK: request.sampling?.topK,
          topP: request.sampling?.topP,
          stopSequences: request.stop
        }
      })
      return { request, resumed: resumed !== undefined }
    })

  /** The generation's stream parts; a kept checkpoint the runtime refuses is forgotten and the turn sent without it. */
  const partsOf = (options: LanguageModel.ProviderOptions, method: string): Stream.Stream<Response.StreamPartEncoded, AiError.AiError> =>
    Stream.unwrap(Effect.map(requestOf(options, method), ({ request, resumed }) => {
      const state = streamState({ module, method })
      const { checkpoint: _, ...fresh } = request
      const chunks: Stream.Stream<GenerateChunk, ProviderError> = resumed
        ? Stream.catchTag(provider.generate(request), "InvalidCheckpoint", () =>
          Stream.suspend(() => {
            if (request.conversation !== undefined) kept.delete(request.conversation)
            return provider.generate(fresh)
          }))
        : provider.generate(request)
      return chunks.pipe(
        Stream.mapError(toAiError(module, method)),
        Stream.mapConcatEffect((chunk) => {
          if (chunk._tag === "Done") {
            if (request.conversation !== undefined && chunk.checkpoint !== undefined) {
              keep(request.conversation, chunk.checkpoint, [...request.messages, state.turn])
            }
            Telemetry.addGenAIAnnotations(options.span, {
              usage: { inputTokens: chunk.usage.promptTokens, outputTokens: chunk.usage.generatedTokens },
              response: { finishReasons: [finishReason(chunk.stopReason)] }
            })
          }
          return Either.match(state.parts(chunk), { onLeft: Effect.fail, onRight: Effect.succeed })
        })
      )
    }))

  return yield* LanguageModel.make({
    generateText: (options) => Effect.map(Stream.runCollect(partsOf(options, "generateText")), (parts) => wholeParts([...parts])),
    streamText: (options) => partsOf(options, "streamText")
  })
})

/** `LanguageModel` over the `Provider` in context, with `config` under each call's overrides. */
export const layer = (config?: Config.Service): Layer.Layer<LanguageModel.LanguageModel, never, Provider> =>
  Layer.effect(LanguageModel.LanguageModel, make(config))

/** An @effect/ai `Model` named `nativegen`. */
export const model = (config?: Config.Service): AiModel.Model<"nativegen", LanguageModel.LanguageModel, Provider> =>
  AiModel.make("nativegen", layer(config))
