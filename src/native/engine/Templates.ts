/**
 * Chat templates: a model's Jinja template (from its GGUF metadata) parsed once at load through
 * @huggingface/jinja, and a chat rendered through it as text or as the model's tokens (with BOS
 * where the model wants one). A model without a template, or with one that does not parse, still
 * loads; only rendering refuses.
 */
import { Template } from "@huggingface/jinja"
import * as Effect from "effect/Effect"
import type { LlamaModel } from "node-llama-cpp"
import { type InvalidEngineRequest, TemplateError } from "../../domain/EngineError.js"
import type { ChatMessage, Role } from "../Protocol.js"
import { invalid, reasonOf } from "./Checks.js"

/** A model's chat template: parsed, or why it does not parse (a model can be used without one). */
export type ChatTemplate =
  | { readonly _tag: "Parsed"; readonly template: Template }
  | { readonly _tag: "Unparsable"; readonly reason: string }

/** The template of a model's `tokenizer.chat_template` metadata; undefined where it has none. */
export const parseTemplate = (source: unknown): ChatTemplate | undefined => {
  if (typeof source !== "string") return undefined
  try {
    return { _tag: "Parsed", template: new Template(source) }
  } catch (cause) {
    return { _tag: "Unparsable", reason: `it does not parse: ${reasonOf(cause)}` }
  }
}

/** What rendering needs of a loaded model. */
export interface Templated {
  readonly model: LlamaModel
  readonly modelPath: string
  readonly template: ChatTemplate | undefined
}

/**
 * A chat as text through the model's own Jinja template. `enableThinking` is the template's
 * `enable_thinking` (Qwen3's: false makes the assistant prompt an empty thought); unset, the
 * template's own default applies.
 */
export const renderText = (
  role: Role,
  loaded: Templated,
  messages: ReadonlyArray<ChatMessage>,
  addGenerationPrompt: boolean,
  enableThinking?: boolean | undefined
): Effect.Effect<string, InvalidEngineRequest | TemplateError> =>
  Effect.gen(function*() {
    if (messages.length === 0) return yield* Effect.fail(invalid("messages", [], "at least one message is needed"))
    if (loaded.template === undefined) {
      return yield* Effect.fail(invalid("role", role, "the model has no chat template"))
    }
    const template = loaded.template
    if (template._tag === "Unparsable") {
      return yield* Effect.fail(new TemplateError({ role, modelPath: loaded.modelPath, reason: template.reason }))
    }
    // A real template can raise (`raise_exception`) or use a value it was not given: the
    // request's fault, reported with the template's own message.
    return yield* Effect.try({
      try: () =>
        template.template.render({
          messages: messages.map((m) => ({ role: m.role, content: m.content })),
          add_generation_prompt: addGenerationPrompt,
          bos_token: "",
          eos_token: "",
          ...(enableThinking === undefined ? {} : { enable_thinking: enableThinking })
        }),
      catch: (cause) => new TemplateError({ role, modelPath: loaded.modelPath, reason: reasonOf(cause) })
    })
  })

/** A chat rendered through the model's own template as its tokens, with BOS where the model prepends one. */
export const render = (
  role: Role,
  loaded: Templated,
  messages: ReadonlyArray<ChatMessage>,
  addGenerationPrompt: boolean,
  enableThinking?: boolean | undefined
): Effect.Effect<ReadonlyArray<number>, InvalidEngineRequest | TemplateError> =>
  Effect.map(renderText(role, loaded, messages, addGenerationPrompt, enableThinking), (text) => {
    const body = loaded.model.tokenize(text, true)
    const bos = loaded.model.tokens.bos
    return (bos !== null && loaded.model.tokens.shouldPrependBosToken ? [bos, ...body] : body) as ReadonlyArray<number>
  })
