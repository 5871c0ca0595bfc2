/**
 * The prompt of a conversation's next turn as an exact extension of what its sequence holds. The
 * held tokens (previous prompt and output, as the model produced them) are kept as they are;
 * after them come the template's text that closes the assistant turn and the new turn's text,
 * both found by rendering through the model's own template and taking differences, so any
 * template that renders turns one after another works, and retokenizing the model's output (which
 * need not give back the same tokens) never happens.
 */
import type { ChatMessage } from "./Inference.js"

/** History (through the last assistant message) and the new turn after it. */
export const splitTurn = (messages: ReadonlyArray<ChatMessage>) => {
  let last = -1
  messages.forEach((m, i) => {
    if (m.role === "assistant") last = i
  })
  return { history: messages.slice(0, last + 1), turn: messages.slice(last + 1) }
}

/**
 * A stand-in history for turns sent without one: only the template's structure between turns is
 * taken from it, never its content.
 */
export const standInHistory: ReadonlyArray<ChatMessage> = [
  { role: "user", content: "." },
  { role: "assistant", content: "." }
]

export interface RenderedTexts {
  /** The history without its last (assistant) message, with the assistant prompt. */
  readonly assistantPrompt: string
  /** The history, without a generation prompt. */
  readonly history: string
  /** History and turn, with the assistant prompt. */
  readonly full: string
}

/**
 * The closing text of the assistant turn and the new turn's text; a string says why not. Both
 * come from the full render (history and turn), where the assistant message is rendered as a
 * message with a turn after it: some templates render the last message of a history differently
 * (Qwen3 gives it an empty thought block), so the history rendered alone only says where the
 * assistant turn's close ends, when it renders the same way.
 */
export const continuationTexts = (
  texts: RenderedTexts,
  assistantContent: string
): { readonly closing: string; readonly turn: string } | string => {
  if (!texts.full.startsWith(texts.assistantPrompt)) return "the template does not render the assistant turn after its prompt"
  const reply = texts.full.slice(texts.assistantPrompt.length)
  if (!reply.startsWith(assistantContent)) return "the template changes the assistant's content"
  const after = reply.slice(assistantContent.length)
  const contentEnd = texts.assistantPrompt.length + assistantContent.length
  const closingLength = texts.full.startsWith(texts.history) && texts.history.length >= contentEnd ? texts.history.length - contentEnd : 0
  return { closing: after.slice(0, closingLength), turn: after.slice(closingLength) }
}

/** Stands in for the last assistant message of a history; what the template prints after it is new. */
const probe = "\u0000nativegen-assistant-message\u0000"

/** History and turn, the history's last (assistant) message replaced by the probe (no thought, no tool calls). */
export const probeChat = (history: ReadonlyArray<ChatMessage>, turn: ReadonlyArray<ChatMessage>): ReadonlyArray<ChatMessage> => [
  ...history.slice(0, -1),
  { role: "assistant", content: probe },
  ...turn
]

/**
 * The closing of the assistant turn and the new turn: the text after the probe in the rendered
 * `probeChat` (with the assistant prompt); undefined when the template does not print the probe.
 */
export const afterProbe = (rendered: string): string | undefined => {
  const at = rendered.lastIndexOf(probe)
  return at < 0 ? undefined : rendered.slice(at + probe.length)
}
