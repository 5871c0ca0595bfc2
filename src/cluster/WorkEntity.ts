/**
 * The work entity: how a runner hands a one-off generation or a decision (no conversation, so no
 * KV to follow) to another runner. Its ids name shards, not requests: `work-<k>` is the first id
 * that Sharding's own hash puts in shard k, so sending to the id of a shard that runner R holds
 * runs the request on R (if the shard moves meanwhile, on its new holder: served all the same).
 * Many requests share one entity (unbounded concurrency); each generation is a turn with its own
 * id whose chunks are stamped as a conversation's are (the entry checks them the same way). The
 * entity also answers the runners' load probes (Load.ts), with what its runner served for others
 * and the ids of what it is serving for them now.
 */
import * as Entity from "@effect/cluster/Entity"
import * as EntityId from "@effect/cluster/EntityId"
import { RunnerAddress } from "@effect/cluster/RunnerAddress"
import type { RunnerStorage } from "@effect/cluster/RunnerStorage"
import { Sharding } from "@effect/cluster/Sharding"
import * as Rpc from "@effect/rpc/Rpc"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import { DecideRequest, DecideResult } from "../domain/Inference.js"
import { Provider } from "../services/Provider.js"
import { ProviderError } from "../services/ProviderError.js"
import { pushTo, SinkClients, TurnEnd, TurnPayload, TurnSink } from "./ChunkChannel.js"
import { stampResumed } from "./TurnChunk.js"
import type { CoalesceOptions } from "./Coalesce.js"
import { Drain } from "./Drain.js"
import * as Load from "./Load.js"
import { Loads, RunnerLoad } from "./Load.js"

export const Work = Entity.make("Work", [
  /** A one-off generation: its chunks are pushed to `sink` (the entry's, ChunkChannel); it answers when they all are. */
  Rpc.make("Generate", {
    payload: TurnPayload,
    success: TurnEnd,
    error: ProviderError
  }),
  Rpc.make("Decide", {
    /** `id`: made by the entry, as a generation's `turn` is (the load answers list it while it runs). */
    payload: { id: Schema.String, request: DecideRequest },
    success: DecideResult,
    error: ProviderError
  }),
  /** The load of the runner that holds the entity (Load.ts). */
  Rpc.make("Load", { success: RunnerLoad })
])

/**
 * The work entity id that lands in each shard of the default group (index 0 is shard 1), found by
 * trying `work-0`, `work-1`, ... through Sharding's hash until every shard has one.
 */
export const idsByShard = (sharding: Sharding["Type"], shards: number): ReadonlyArray<string> => {
  const ids = new Array<string | undefined>(shards)
  let missing = shards
  for (let k = 0; missing > 0; k++) {
    const id = `work-${k}`
    const shard = sharding.getShardId(EntityId.make(id), Work.getShardGroup(EntityId.make(id)))
    if (ids[shard.id - 1] === undefined) {
      ids[shard.id - 1] = id
      missing--
    }
  }
  return ids.map((id) => id!)
}

/** The handlers over the runner's local Provider; a generation's chunks pushed as a turn's are (`wire`: the hold). */
export const layer = (wire: CoalesceOptions = {}) => Work.toLayer(
  Effect.gen(function*() {
    const provider = yield* Provider
    const loads = yield* Loads
    const drain = yield* Drain
    const pusher = yield* SinkClients
    return {
      Generate: ({ payload }) =>
        drain.track(Stream.unwrapScoped(Effect.as(loads.serving("generations", payload.turn), provider.generate(payload.request).pipe(stampResumed(payload.turn, payload.resume))))).pipe(
          pushTo(pusher, payload.sink, payload.turn, "a one-off generation", wire)
        ),
      Decide: ({ payload }) => Effect.scoped(Effect.zipRight(loads.serving("decisions", payload.id), provider.decide(payload.request))),
      Load: () => loads.own
    }
  }),
  { concurrency: "unbounded", maxIdleTime: "1 minute" }
)

/** This runner's Loads, probing the others through their work entities. */
export const layerLoads = (
  address: RunnerAddress,
  shards: number,
  timing?: Load.LoadTiming
): Layer.Layer<Loads, never, Sharding | RunnerStorage | Provider | Drain | TurnSink> =>
  Layer.scoped(
    Loads,
    Effect.gen(function*() {
      const clientFor = yield* Work.client
      const ids = idsByShard(yield* Sharding, shards)
      const sink = yield* TurnSink
      return yield* Load.make(address, shards, (shard) => clientFor(ids[shard - 1]!).Load(), timing, sink)
    })
  )
