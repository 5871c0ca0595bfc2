/**
 * OpenAI's API under `/v1`: models, chat completions and completions, streamed as server-sent
 * events or whole, over the Provider (through KeyedConversations for continuation reuse).
 */
import * as Layer from "effect/Layer"

export const routes = Layer.empty
