/**
 * Ollama's API under `/api`: chat, generate (newline-delimited JSON streams or whole), tags, ps,
 * show and version, over the Provider (through KeyedConversations for continuation reuse).
 */
import * as Layer from "effect/Layer"

export const routes = Layer.empty
