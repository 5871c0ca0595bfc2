/**
 * The Provider the public servers get on a runner: the local Provider, except that a generation
 * of a conversation (its `conversation`, else its checkpoint's) runs as a turn of that
 * conversation's entity, on whichever runner holds it (this one included: on its entity in
 * process where it is active, ActiveConversations), by the entry's rules for a turn
 * (RoutedTurn.ts: exactly once; resumed or a typed failure when its runner is lost). Clients see
 * the same Provider as on a single server.
 */
import { Sharding } from "@effect/cluster/Sharding"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Stream from "effect/Stream"
import type { GenerateChunk, GenerateRequest, PrepareRequest } from "../domain/Inference.js"
import { Provider } from "../services/Provider.js"
import type { ProviderError } from "../services/ProviderError.js"
import { ActiveConversations } from "./ActiveConversations.js"
import { payload, receive, SinkClients, type TurnPayload, TurnSink } from "./ChunkChannel.js"
import { Loads } from "./Load.js"
import { Conversation, conversationShard } from "./ConversationEntity.js"
import { refusedAsProviderErrors, routedTurn } from "./RoutedTurn.js"
import { resumable } from "./TurnChunk.js"
import { Preparation } from "./PreparationEntity.js"

/** The conversation a request belongs to: its id, or its checkpoint's. */
export const conversationOf = (request: GenerateRequest): string | undefined =>
  request.conversation ?? request.checkpoint?.conversation

/**
 * How this runner runs a turn of a conversation on its entity, its chunks pushed to `sink`: in
 * process where the entity is active here (ActiveConversations), else, or where it refuses (it
 * closed: its shard moved), through Sharding, which starts the entity or sends the turn to the
 * runner that holds it. For the entry's own conversations (below) and the turns other runners send
 * straight to this one (DirectServer.ts).
 */
export const entityTurns = Effect.gen(function*() {
  const clientFor = yield* Conversation.client
  const sharding = yield* Sharding
  const active = yield* ActiveConversations
  return (conversation: string, payload: TurnPayload) => {
    const delivered = clientFor(conversation).Turn(payload).pipe(refusedAsProviderErrors(`conversation ${conversation}`))
    const onEntity = sharding.hasShardId(conversationShard(sharding, conversation)) ? active.lookup(conversation) : undefined
    return onEntity === undefined ? delivered : onEntity(payload).pipe(Effect.catchTag("NotOwner", () => delivered))
  }
})

/** The routing Provider over the local one (the Provider in context) and the Sharding of this runner. */
export const make = Effect.gen(function*() {
  const local = yield* Provider
  const sink = yield* TurnSink
  const clients = yield* SinkClients
  const loads = yield* Loads
  const sharding = yield* Sharding
  const onEntity = yield* entityTurns

  /**
   * The sink of the runner that holds `conversation`'s shard, as the last load answers name it;
   * none where this runner holds it (its own entity is called in process) or it is not known.
   */
  const ownerOf = (conversation: string) =>
    Effect.map(loads.others, (others) => {
      const shard = conversationShard(sharding, conversation)
      if (sharding.hasShardId(shard)) return undefined
      return others.find((load) => load.shards.includes(shard.id))?.sink
    })

  const generate = (request: GenerateRequest): Stream.Stream<GenerateChunk, ProviderError> => {
    const conversation = conversationOf(request)
    if (conversation === undefined) return local.generate(request)
    return routedTurn(`conversation ${conversation}`, {
      owner: ownerOf(conversation),
      direct: (owner, turn, resume) => receive(sink, turn, (at) => clients.serve(owner, { conversation, ...payload(turn, request, at, resume) })),
      viaCluster: (turn, resume) => receive(sink, turn, (at) => onEntity(conversation, payload(turn, request, at, resume)))
    }, resumable(request))
  }
  // A preparation runs where the conversation's turns will (PreparationEntity.ts).
  const preparationFor = yield* Preparation.client
  const prepare = (request: PrepareRequest) =>
    preparationFor(request.conversation).Prepare(request).pipe(refusedAsProviderErrors(`conversation ${request.conversation}`))
  return Provider.of({ ...local, generate, prepare })
})

/** Replaces the Provider in context with the routing one. */
export const layer: Layer.Layer<Provider, never, Provider | Sharding | TurnSink | SinkClients | Loads | ActiveConversations> = Layer.effect(Provider, make)
