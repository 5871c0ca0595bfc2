/**
 * A cluster runner inside `nativegen serve --cluster`: @effect/cluster's Sharding over our
 * transport (src/cluster/Transport.ts) and runner storage (src/cluster/Storage.ts), the
 * conversation entity served from the runtime's local Provider, and the routing Provider that the
 * public servers get in its place, and the HTTP conversation keys shared by all runners
 * (SharedKeys). Built over a runtime (it needs the local Provider); the layer's Provider is the
 * routing one.
 *
 *   servers <- routing Provider <- load routing (Load.ts: the runners' loads, probed) <- Sharding
 *           <- Conversation entity, Work entity <- local Provider (the runtime)
 *   a turn: entry's routing Provider -> owner's sink (direct, where the loads name the owner; else
 *           through Sharding) -> owner's entity; its chunks: owner's entity -> entry's sink (ChunkChannel.ts)
 *   Sharding <- transport, storage, health, ShardingConfig
 */
import * as MessageStorage from "@effect/cluster/MessageStorage"
import type { RunnerAddress } from "@effect/cluster/RunnerAddress"
import * as RunnerServer from "@effect/cluster/RunnerServer"
import * as Runners from "@effect/cluster/Runners"
import type { RunnerStorage } from "@effect/cluster/RunnerStorage"
import type { Sharding } from "@effect/cluster/Sharding"
import * as ShardingConfig from "@effect/cluster/ShardingConfig"
import * as SocketRunner from "@effect/cluster/SocketRunner"
import type * as SocketServer from "@effect/platform/SocketServer"
import * as RpcSerialization from "@effect/rpc/RpcSerialization"
import type { SqlClient } from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type { KeyedTurns } from "../http/KeyedConversations.js"
import type { Conversations } from "../services/Conversations.js"
import { Provider } from "../services/Provider.js"
import * as ActiveConversations from "./ActiveConversations.js"
import * as ChunkChannel from "./ChunkChannel.js"
import * as ConversationEntity from "./ConversationEntity.js"
import * as Drain from "./Drain.js"
import * as Health from "./Health.js"
import * as LoadRouting from "./LoadRouting.js"
import * as Placement from "./Placement.js"
import * as PreparationEntity from "./PreparationEntity.js"
import * as DirectServer from "./DirectServer.js"
import * as RoutingProvider from "./RoutingProvider.js"
import * as SharedKeys from "./SharedKeys.js"
import * as Storage from "./Storage.js"
import * as Transcripts from "./Transcripts.js"
import * as Transport from "./Transport.js"
import * as WorkEntity from "./WorkEntity.js"

export interface RunnerSettings {
  /** Where the other runners reach this one (a Unix socket path as host with port 0, or HOST:PORT). */
  readonly address: RunnerAddress
  /** Where it listens, when not at `address` (e.g. 0.0.0.0 behind a public address). */
  readonly listen?: RunnerAddress | undefined
  readonly storage: Storage.StorageSpec
  /** How fast a dead runner is noticed (Health.timing). */
  readonly detection: Duration.DurationInput
  /** Shards per group: the same on every runner. */
  readonly shards: number
  /**
   * How long an owner holds a remote stream's chunks after the first, to send them in fewer
   * messages (Coalesce.ts; default 0: each message takes what is ready when it leaves, nothing waits).
   */
  readonly hold?: Duration.DurationInput | undefined
  /** How long a runner giving up a shard waits for its turns to end (default `defaultDrain`). */
  readonly drain?: Duration.DurationInput | undefined
  /** A TCP runner's sink port (ChunkChannel; default 0: a free one). */
  readonly sinkPort?: number | undefined
}

/** Turns are given 30 s to end when their shard moves; a turn still running then is interrupted. */
export const defaultDrain = Duration.seconds(30)

/** Sharding of this runner with its transport, storage (and its SQL client) and health check. */
export const layerSharding = (
  settings: RunnerSettings
): Layer.Layer<Sharding | Runners.Runners | RunnerStorage | SqlClient | Storage.StartUp, SqlError | Storage.StorageBusy | SocketServer.SocketServerError> => {
  const timing = Health.timing(settings.detection)
  const base = Layer.mergeAll(
    ShardingConfig.layer({
      runnerAddress: Option.some(settings.address),
      runnerListenAddress: Option.fromNullable(settings.listen),
      shardsPerGroup: settings.shards,
      // A local turn is not serialized for nothing: it takes the same path minus the socket.
      simulateRemoteSerialization: false,
      // A runner giving up a shard (draining, or a runner joined) lets the shard's turns finish
      // and saves their conversations' KV before the shard moves, within this bound.
      entityTerminationTimeout: settings.drain ?? defaultDrain,
      // Stay registered until the entities have stopped: a runner that unregisters first is
      // dropped by the others at once, and their requests in flight on it are cut.
      preemptiveShutdown: false,
      ...timing.config
    }),
    MessageStorage.layerNoop,
    Transport.layerClientProtocol
  ).pipe(Layer.provideMerge(RpcSerialization.layerMsgPack))
  const health = Health.layer(timing.pingTimeout).pipe(Layer.provide(Runners.layerRpc))
  // SocketRunner.layer, with our server protocol (Transport.layerServerProtocol: no stream acks).
  const runner = RunnerServer.layerWithClients.pipe(
    Layer.provide(Transport.layerServerProtocol.pipe(Layer.provide(Transport.layerSocketServer(settings.listen ?? settings.address))))
  )
  return runner.pipe(
    Layer.provide(health),
    Layer.provideMerge(Storage.layer(settings.storage)),
    Layer.provide(base)
  )
}

/**
 * A Sharding that is no runner (it serves no entity and takes no shards): for tools that look at
 * the cluster (`cluster status`, tests) through the same storage, with its SQL client.
 */
export const layerClientOnly = (
  settings: Pick<RunnerSettings, "storage" | "shards"> & {
    /** The runners' detection time, where known: `Status` then counts the runners Sharding counts (default: the package's 35 s lock expiry). */
    readonly detection?: Duration.DurationInput | undefined
  }
) =>
  SocketRunner.layerClientOnly.pipe(
    Layer.provideMerge(Storage.layer(settings.storage)),
    Layer.provide(Layer.mergeAll(
      MessageStorage.layerNoop,
      Transport.layerClientProtocol
    ).pipe(Layer.provideMerge(RpcSerialization.layerMsgPack))),
    // Kept in the output: `Status.snapshot` reads the shard count from it.
    Layer.provideMerge(ShardingConfig.layer({
      runnerAddress: Option.none(),
      shardsPerGroup: settings.shards,
      ...(settings.detection === undefined ? {} : Health.timing(settings.detection).config)
    }))
  )

/** The runner over a runtime: its output Provider is the routing one; the local Provider is its input. */
export const layer = (
  settings: RunnerSettings
): Layer.Layer<Provider | Sharding | KeyedTurns, SqlError | Storage.StorageBusy | SocketServer.SocketServerError, Provider | Conversations> => {
  // How an owner sends a stream's chunks to its entry: the first at once, then what is ready (ChunkChannel.pushTo; with a hold, Coalesce.ts).
  const wire = { hold: settings.hold ?? 0 }
  // One Drain for the entities and the load answers: a stopping runner lets its streams end first.
  const drain = Drain.layer(settings.drain ?? defaultDrain)
  return Layer.mergeAll(
    // Conversations to their entities; one-offs and decisions by load; the rest local.
    RoutingProvider.layer.pipe(Layer.provide(LoadRouting.layer(settings.shards))),
    Drain.closingAfter(Layer.mergeAll(ConversationEntity.layer({ wire }), WorkEntity.layer(wire), PreparationEntity.layer)),
    SharedKeys.layer
  ).pipe(
    Layer.provide(Layer.mergeAll(Placement.layer(settings.address), WorkEntity.layerLoads(settings.address, settings.shards), Transcripts.layer)),
    // Turns' chunks come straight from their owners (ChunkChannel): this runner's sink and pusher.
    Layer.provide(ChunkChannel.layerPusher.pipe(
      Layer.provideMerge(ChunkChannel.layerSink(settings.address, settings.listen ?? settings.address, settings.sinkPort ?? 0)),
      // The sink also takes turns and one-offs sent straight to this runner (DirectServer.ts).
      Layer.provide(DirectServer.layer(settings.shards))
    )),
    // The conversation entities active here, for the turns sent straight to this runner.
    Layer.provide(ActiveConversations.layer),
    Layer.provideMerge(drain),
    Layer.provideMerge(layerSharding(settings)),
    Layer.mapError(Storage.withCause),
    Layer.tap(() =>
      Effect.logInfo(
        `cluster: runner at ${Transport.formatAddress(settings.address)}, storage ${Storage.describeStorage(settings.storage)}, ` +
          `${settings.shards} shards, failure detection ${Duration.format(Duration.decode(settings.detection))}`
      )
    )
  )
}
