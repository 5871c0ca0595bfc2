/**
 * The prompt of a conversation's next turn as an exact extension of what its sequence holds. The
 * held tokens (previous prompt and output, as the model produced them) are kept as they are;
 * after them comes the text the template puts after the last assistant message's content in the
 * whole chat (the closing of the assistant turn, then the new turn). That text is found by
 * rendering the chat with a probe standing in for that content, so any template works, also one
 * that renders earlier turns differently once a new turn follows (Qwen3 drops a thought block
 * and strips the answer's leading newlines), and retokenizing the model's output (which need not
 * give back the same tokens) never happens.
 */
import type { ChatMessage } from "../../domain/Inference.js"

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

/** Stands in for the last assistant message's content; what the template prints after it is new. */
const probe = "\u0000nativegen-assistant-content\u0000"

/** History and turn, the history's last (assistant) message's content replaced by the probe. */
export const probeChat = (history: ReadonlyArray<ChatMessage>, turn: ReadonlyArray<ChatMessage>): ReadonlyArray<ChatMessage> => [
  ...history.map((m, i) => (i === history.length - 1 ? { ...m, content: probe } : m)),
  ...turn
]

/** The text after the probe in the rendered `probeChat` (with the assistant prompt); a failure says why not. */
export const continuationText = (rendered: string): { readonly text: string } | { readonly failure: string } => {
  const at = rendered.lastIndexOf(probe)
  return at < 0
    ? { failure: "the template does not render the last assistant message's content" }
    : { text: rendered.slice(at + probe.length) }
}
