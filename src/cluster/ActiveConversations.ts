/**
 * The conversation entities active on this runner, each with the way to run a turn on it in
 * process. A turn sent straight to this runner (DirectServer.ts) runs on its entity this way while
 * the entity lives here, without Sharding's envelope path (the in-process entity call, its mailbox
 * and its reply: ~0.3 ms of a remote turn's first token in bench/_cluster-path.ts). What the
 * entity guarantees still holds, because the entity keeps it (ConversationEntity.ts): its turns run
 * one at a time whichever way they came; an entity that closes (its shard moving, its runner
 * draining, or idle) leaves this registry first, lets the turn it runs end before it hands its KV
 * over, and refuses a turn that reaches it after that (NotOwner: the entry sends it through the
 * cluster). A conversation with no active entity here goes through Sharding, which starts one.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import type { ProviderError } from "../services/ProviderError.js"
import type { NotOwner, TurnEnd, TurnPayload } from "./ChunkChannel.js"

/** A turn of an active conversation: its chunks pushed to `sink`, as the entity's `Turn` does. */
export type ActiveTurn = (turn: TurnPayload) => Effect.Effect<
  TurnEnd,
  ProviderError | NotOwner
>

export class ActiveConversations extends Context.Tag("nativegen/cluster/ActiveConversations")<ActiveConversations, {
  /**
   * Registers `conversation`'s entity while the scope (the entity's) lasts; `inProcess` says
   * whether its next turn may run in process now (false: through Sharding, see ConversationEntity).
   */
  readonly register: (conversation: string, turn: ActiveTurn, inProcess?: () => boolean) => Effect.Effect<void, never, Scope.Scope>
  /** The way to run a turn on `conversation`'s entity in process, if it is active here and takes one now. */
  readonly lookup: (conversation: string) => ActiveTurn | undefined
}>() {}

export const layer: Layer.Layer<ActiveConversations> = Layer.sync(ActiveConversations, () => {
  const active = new Map<string, { readonly turn: ActiveTurn; readonly inProcess: () => boolean }>()
  return ActiveConversations.of({
    register: (conversation, turn, inProcess = () => true) => {
      const entry = { turn, inProcess }
      return Effect.acquireRelease(
        Effect.sync(() => void active.set(conversation, entry)),
        () => Effect.sync(() => void (active.get(conversation) === entry && active.delete(conversation)))
      )
    },
    lookup: (conversation) => {
      const entry = active.get(conversation)
      return entry !== undefined && entry.inProcess() ? entry.turn : undefined
    }
  })
})
