/**
 * nativegen's extensions to OpenAI's requests, as headers a client can set without touching the
 * body: the conversation key (`X-Nativegen-Conversation`, or else the body's `prompt_cache_key`,
 * OpenAI's own field for cache affinity) that gives continuation reuse to clients that resend the
 * history, and the lane (`X-Nativegen-Lane: foreground | utility`) a generation is scheduled in.
 */
import type * as Headers from "@effect/platform/Headers"
import * as Effect from "effect/Effect"
import type { GenerationLane } from "../../domain/Inference.js"
import { MAX_KEY_LENGTH } from "../KeyedConversations.js"
import type { KeySource } from "./Errors.js"
import { invalidField, type Refused } from "./Refused.js"

export const CONVERSATION_HEADER = "X-Nativegen-Conversation"
export const LANE_HEADER = "X-Nativegen-Lane"

export interface ConversationKey {
  readonly key: string | undefined
  readonly source: KeySource | undefined
}

export const conversationKeyOf = (
  headers: Headers.Headers,
  promptCacheKey: string | null | undefined
): Effect.Effect<ConversationKey, Refused> => {
  const header = headers[CONVERSATION_HEADER.toLowerCase()]
  const [key, source]: readonly [string | undefined, KeySource] = header !== undefined
    ? [header, CONVERSATION_HEADER]
    : [promptCacheKey ?? undefined, "prompt_cache_key"]
  if (key === undefined) return Effect.succeed({ key: undefined, source: undefined })
  return key.length === 0 || key.length > MAX_KEY_LENGTH
    ? Effect.fail(invalidField(source, `the conversation key must be 1 to ${MAX_KEY_LENGTH} characters (got ${key.length})`))
    : Effect.succeed({ key, source })
}

export const laneOf = (headers: Headers.Headers): Effect.Effect<GenerationLane | undefined, Refused> => {
  const lane = headers[LANE_HEADER.toLowerCase()]
  if (lane === undefined) return Effect.succeed(undefined)
  return lane === "foreground" || lane === "utility"
    ? Effect.succeed(lane)
    : Effect.fail(invalidField(LANE_HEADER, `lane ${JSON.stringify(lane)} is not one of foreground, utility`))
}
