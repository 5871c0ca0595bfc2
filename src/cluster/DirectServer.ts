/**
 * The owner side of requests sent straight to this runner's sink (ChunkChannel's `Serve` and
 * `ServeOneOff`), run through this runner's own entities in process (Sharding calls a local
 * entity without a socket), so what the entities guarantee still holds:
 *
 * - A conversation's turn runs through its conversation entity, if this runner holds the
 *   conversation's shard: on the entity in process where it is active (ActiveConversations), else
 *   through Sharding, which starts it. Either way its turns stay in order, and its KV is handed
 *   over when the entity closes. A runner that does not hold the shard (the entry's view was stale) answers NotOwner,
 *   and the entry sends the turn through the cluster.
 * - A one-off generation or a decision runs through the work entity of a shard this runner holds
 *   (it counts in the runner's load answers as served for another, as one sent through the cluster
 *   does). A runner that holds no shard (it is stopping) answers NotOwner.
 */
import { Sharding } from "@effect/cluster/Sharding"
import * as ShardId from "@effect/cluster/ShardId"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type { ActiveConversations } from "./ActiveConversations.js"
import { NotOwner, TurnServer } from "./ChunkChannel.js"
import { conversationShard } from "./ConversationEntity.js"
import { refusedAsProviderErrors } from "./RoutedTurn.js"
import { entityTurns } from "./RoutingProvider.js"
import { idsByShard, Work } from "./WorkEntity.js"

/** The TurnServer of a runner whose shard groups have `shards` shards. */
export const layer = (shards: number): Layer.Layer<TurnServer, never, Sharding | ActiveConversations> =>
  Layer.effect(
    TurnServer,
    Effect.gen(function*() {
      const sharding = yield* Sharding
      const onEntity = yield* entityTurns
      const workFor = yield* Work.client
      const workIds = idsByShard(sharding, shards)
      /** The work entity id of a shard this runner holds, if any. */
      const heldWorkId = () => workIds.find((_, i) => sharding.hasShardId(ShardId.make("default", i + 1)))
      return TurnServer.of({
        serve: ({ conversation, ...turn }) => {
          if (!sharding.hasShardId(conversationShard(sharding, conversation))) return Effect.fail(new NotOwner({ conversation }))
          return onEntity(conversation, turn)
        },
        serveOneOff: (oneOff) => {
          const id = heldWorkId()
          if (id === undefined) return Effect.fail(new NotOwner({}))
          return workFor(id).Generate(oneOff).pipe(refusedAsProviderErrors("a one-off generation"))
        },
        serveDecision: (decision) => {
          const id = heldWorkId()
          if (id === undefined) return Effect.fail(new NotOwner({}))
          return workFor(id).Decide(decision).pipe(refusedAsProviderErrors("a decision"))
        }
      })
    })
  )
