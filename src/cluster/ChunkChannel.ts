/**
 * The direct channel of a turn's chunks: the runner that serves a turn pushes its chunks straight
 * to the entry runner's sink, instead of streaming them back as the entity's reply. The entity's
 * `Turn` is a request-response call that answers once the turn has ended, its chunks all pushed.
 *
 * Why: @effect/cluster streams an entity's reply through the entity's RPC server, which sends each
 * message only after the entry's `AckChunk` for the previous one, and @effect/rpc 0.76 drops those
 * acks once the entity's input has ended (its shard moving, its runner stopping): a turn streaming
 * in a shard that moved to a joining runner stalled and was cut 30 s later. A request-response
 * call is not cut: closing the entity waits for it (`entityTerminationTimeout`). The chunks also
 * skip the envelope path (Sharding, entity manager, acks) for one RPC call per coalesced message.
 *
 * The sink (entry side): every runner listens for pushes, on a Unix socket beside its runner socket
 * or on an ephemeral TCP port of its host, and names that address in each turn it sends. A push
 * carries chunks of one turn; the sink offers them to the turn's inbox and answers whether the turn
 * is still awaited, once they are in (the inbox is bounded, so a slow client holds its owner back).
 * The pusher (owner side): one RPC client per sink address, kept while used; a turn a runner
 * serves for itself (the entity is local) goes to its own sink in process.
 *
 * Direct turns: the sink also takes a turn's request (`Serve`) from an entry that knows, from the
 * runners' load answers, which runner holds the conversation's shard, and a one-off generation
 * (`ServeOneOff`) or a decision (`ServeDecision`) from an entry that chose this runner by load;
 * the runner runs them through its own entities (DirectServer.ts), or refuses them with NotOwner.
 */
import { RunnerAddress } from "@effect/cluster/RunnerAddress"
import { isSocketError, Socket, type SocketError } from "@effect/platform/Socket"
import * as SocketServer from "@effect/platform/SocketServer"
import * as Rpc from "@effect/rpc/Rpc"
import * as RpcClient from "@effect/rpc/RpcClient"
import type { RpcClientError } from "@effect/rpc/RpcClientError"
import * as RpcGroup from "@effect/rpc/RpcGroup"
import * as RpcSerialization from "@effect/rpc/RpcSerialization"
import * as RpcServer from "@effect/rpc/RpcServer"
import * as Cause from "effect/Cause"
import * as Chunk from "effect/Chunk"
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Equal from "effect/Equal"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Mailbox from "effect/Mailbox"
import * as RcMap from "effect/RcMap"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import { EngineUnavailable } from "../domain/EngineError.js"
import { DecideRequest, DecideResult, GenerateRequest } from "../domain/Inference.js"
import { ProviderError } from "../services/ProviderError.js"
import { coalesce, type CoalesceOptions } from "./Coalesce.js"
import { TurnChunk, TurnResume } from "./TurnChunk.js"
import { formatAddress, isUnix, layerSocketServer, openSocket } from "./Transport.js"

/** What the owner answers a turn with once its chunks are all pushed: how many (the entry checks it received them all). */
export const TurnEnd = Schema.Struct({ chunks: Schema.NonNegativeInt })
export type TurnEnd = typeof TurnEnd.Type

/**
 * A direct turn reached a runner that does not hold its conversation's shard, or a direct one-off
 * one that holds no shard (stopping): the entry's view of the shards was stale.
 */
export class NotOwner extends Schema.TaggedError<NotOwner>()("NotOwner", { conversation: Schema.optional(Schema.String) }) {}

/**
 * A turn sent to the runner that serves it (a conversation's turn, or a one-off): its id, its
 * request, the entry's sink its chunks are pushed to, and, where it resumes after its runner was
 * lost, what the entry already delivered (TurnChunk.ts).
 */
export const TurnPayload = Schema.Struct({
  turn: Schema.String,
  request: GenerateRequest,
  sink: RunnerAddress,
  resume: Schema.optional(TurnResume)
})
export type TurnPayload = typeof TurnPayload.Type

/** A turn's payload; `resume` where it resumes. */
export const payload = (turn: string, request: GenerateRequest, sink: RunnerAddress, resume: TurnResume | undefined): TurnPayload =>
  resume === undefined ? { turn, request, sink } : { turn, request, sink, resume }

/** A turn sent straight to the runner that holds its conversation (`Serve`), its chunks pushed to `sink`. */
export const DirectTurn = Schema.Struct({ conversation: Schema.String, ...TurnPayload.fields })
export type DirectTurn = typeof DirectTurn.Type

/** A one-off generation sent straight to the runner the entry chose by load (`ServeOneOff`), its chunks pushed to `sink`. */
export const DirectOneOff = TurnPayload
export type DirectOneOff = TurnPayload

/** A decision sent straight to the runner the entry chose by load (`ServeDecision`): request-response, no chunks. */
export const DirectDecision = Schema.Struct({ id: Schema.String, request: DecideRequest })
export type DirectDecision = typeof DirectDecision.Type

export class ChunkRpcs extends RpcGroup.make(
  Rpc.make("Push", {
    payload: { turn: Schema.String, chunks: Schema.Array(TurnChunk) },
    /** Whether the turn is still awaited (false: its entry gave up on it; the owner stops). */
    success: Schema.Boolean
  }),
  Rpc.make("Serve", { payload: DirectTurn, success: TurnEnd, error: Schema.Union(ProviderError, NotOwner) }),
  Rpc.make("ServeOneOff", { payload: DirectOneOff, success: TurnEnd, error: Schema.Union(ProviderError, NotOwner) }),
  Rpc.make("ServeDecision", { payload: DirectDecision, success: DecideResult, error: Schema.Union(ProviderError, NotOwner) })
) {}

/** How a runner serves direct turns, one-offs and decisions (DirectServer.ts: through its own entities). */
export class TurnServer extends Context.Tag("nativegen/cluster/TurnServer")<TurnServer, {
  readonly serve: (turn: DirectTurn) => Effect.Effect<TurnEnd, ProviderError | NotOwner>
  readonly serveOneOff: (oneOff: DirectOneOff) => Effect.Effect<TurnEnd, ProviderError | NotOwner>
  readonly serveDecision: (decision: DirectDecision) => Effect.Effect<DecideResult, ProviderError | NotOwner>
}>() {}

export interface Inbox<E> {
  readonly chunks: Mailbox.Mailbox<TurnChunk, E>
  readonly received: () => number
}

/** Chunks a turn's inbox holds before a push waits for the client to read. */
export const inboxCapacity = 256

/** The entry side: where owners push, and each awaited turn's inbox. */
export class TurnSink extends Context.Tag("nativegen/cluster/TurnSink")<TurnSink, {
  /** The address owners push to (in every Turn this runner sends). */
  readonly address: RunnerAddress
  /** An inbox for `turn`'s chunks while the scope lasts, and how many chunks it has taken in. */
  readonly open: <E>(turn: string) => Effect.Effect<Inbox<E>, never, Scope.Scope>
  /** What a push does, in process: `turn`'s chunks into its inbox; whether the turn is still awaited. */
  readonly deliver: (turn: string, chunks: ReadonlyArray<TurnChunk>) => Effect.Effect<boolean>
  /** Turns, one-offs and decisions other runners sent straight to this one since it started (`Serve`, `ServeOneOff`, `ServeDecision`), refused ones included. */
  readonly directTurns: () => number
}>() {}

/** Where a runner at `listen` takes pushes: a Unix socket beside its own, or `port` of its host (0: a free one). */
export const sinkListenAddress = (listen: RunnerAddress, port = 0): RunnerAddress =>
  isUnix(listen) ? RunnerAddress.make({ host: `${listen.host}.chunks`, port: 0 }) : RunnerAddress.make({ host: listen.host, port })

/**
 * The sink of a runner that others reach at `advertised` and that listens at `listen`: its push
 * server, and the address it names (the advertised host, with the port it was given).
 */
export const layerSink = (
  advertised: RunnerAddress,
  listen: RunnerAddress,
  port = 0
): Layer.Layer<TurnSink, SocketServer.SocketServerError, TurnServer> =>
  Layer.scoped(
    TurnSink,
    Effect.gen(function*() {
      const inboxes = new Map<string, (chunks: ReadonlyArray<TurnChunk>) => Effect.Effect<boolean>>()
      const deliver = (turn: string, chunks: ReadonlyArray<TurnChunk>) => inboxes.get(turn)?.(chunks) ?? Effect.succeed(false)
      const turns = yield* TurnServer
      let directTurns = 0
      /** A request sent straight to this runner, counted as it arrives. */
      const counted = <P, A, E>(serve: (payload: P) => Effect.Effect<A, E>) => (payload: P) =>
        Effect.suspend(() => {
          directTurns++
          return serve(payload)
        })
      const handlers = ChunkRpcs.toLayer({
        Push: ({ chunks, turn }) => deliver(turn, chunks),
        Serve: counted(turns.serve),
        ServeOneOff: counted(turns.serveOneOff),
        ServeDecision: counted(turns.serveDecision)
      })
      const server = yield* Layer.build(layerSocketServer(sinkListenAddress(listen, port)))
      // No spans on either end (nothing here records them): a call costs ~15% less CPU without
      // them (bench/_sink-rtt.ts: a Push round trip 500 -> 425 µs), as @effect/cluster's own runner RPCs.
      yield* Layer.buildWithScope(
        RpcServer.layer(ChunkRpcs, { disableTracing: true }).pipe(
          Layer.provide(handlers),
          Layer.provide(RpcServer.layerProtocolSocketServer),
          Layer.provide(RpcSerialization.layerMsgPack),
          Layer.provide(Layer.succeedContext(server))
        ),
        yield* Effect.scope
      )
      const bound = Context.get(server, SocketServer.SocketServer).address
      const address = bound._tag === "UnixAddress"
        ? RunnerAddress.make({ host: bound.path, port: 0 })
        : RunnerAddress.make({ host: advertised.host, port: bound.port })
      yield* Effect.logDebug(`cluster: turn chunks pushed to ${formatAddress(address)}`)
      return TurnSink.of({
        address,
        deliver,
        directTurns: () => directTurns,
        open: <E>(turn: string) =>
          Effect.acquireRelease(
            Effect.gen(function*() {
              const inbox = yield* Mailbox.make<TurnChunk, E>(inboxCapacity)
              let received = 0
              // A push answers false where its chunks were not all taken: the inbox was shut (the
              // entry stopped reading), also while the push waited for room in it.
              inboxes.set(turn, (chunks) => {
                received += chunks.length
                return Effect.map(inbox.offerAll(chunks), Chunk.isEmpty)
              })
              return { chunks: inbox, received: () => received }
            }),
            // Shut, not only forgotten: a push waiting for room in a full inbox is let go (its owner
            // then stops the turn) instead of waiting for ever, holding its conversation's entity.
            ({ chunks }) => Effect.zipRight(Effect.sync(() => inboxes.delete(turn)), chunks.shutdown)
          )
      })
    })
  )

/** A runner's sink could not be reached: a push to the entry's, or a direct turn to the owner's (the runner is gone, or its connection broke). */
export class SinkUnreachable extends Data.TaggedError("SinkUnreachable")<{
  readonly sink: string
  readonly reason: string
}> {
  override get message() {
    return `the runner sink at ${this.sink} cannot be reached: ${this.reason}`
  }
}

/** The owner side: pushes a turn's chunks to the sink its entry named. */
export class SinkClients extends Context.Tag("nativegen/cluster/SinkClients")<SinkClients, {
  /** Whether `sink` is this runner's own: pushes to it are delivered in process. */
  readonly inProcess: (sink: RunnerAddress) => boolean
  /** Pushes a turn's chunks to the sink its entry named. */
  readonly push: (sink: RunnerAddress, turn: string, chunks: ReadonlyArray<TurnChunk>) => Effect.Effect<boolean, SinkUnreachable>
  /** Sends a turn straight to the runner whose sink this is. */
  readonly serve: (sink: RunnerAddress, turn: DirectTurn) => Effect.Effect<TurnEnd, ProviderError | NotOwner | SinkUnreachable>
  /** Sends a one-off generation straight to the runner whose sink this is. */
  readonly serveOneOff: (sink: RunnerAddress, oneOff: DirectOneOff) => Effect.Effect<TurnEnd, ProviderError | NotOwner | SinkUnreachable>
  /** Sends a decision straight to the runner whose sink this is. */
  readonly serveDecision: (sink: RunnerAddress, decision: DirectDecision) => Effect.Effect<DecideResult, ProviderError | NotOwner | SinkUnreachable>
}>() {}

/** A connection to `sink`: Unix socket, or TCP with noDelay. */
const connect = (sink: RunnerAddress) =>
  Effect.gen(function*() {
    const socket = yield* openSocket(sink)
    const protocol = yield* RpcClient.makeProtocolSocket().pipe(
      Effect.provideService(Socket, socket),
      Effect.provide(RpcSerialization.layerMsgPack)
    )
    return yield* RpcClient.make(ChunkRpcs, { disableTracing: true }).pipe(Effect.provideService(RpcClient.Protocol, protocol))
  })

/** The pusher of a runner whose own sink is in context: to its own sink (a turn it serves for itself) in process. */
export const layerPusher: Layer.Layer<SinkClients, never, TurnSink> = Layer.scoped(
  SinkClients,
  Effect.gen(function*() {
    const own = yield* TurnSink
    // One client per sink, closed a while after its last push.
    const clients = yield* RcMap.make({ lookup: connect, idleTimeToLive: "1 minute" })
    const unreachable = (sink: RunnerAddress) => (reason: string) => new SinkUnreachable({ sink: formatAddress(sink), reason })
    /** A call on `sink`'s runner (a push, a turn, a one-off); the connection's failures as SinkUnreachable, its answer's own errors as they are. */
    const call = <A, E extends { readonly _tag: string }>(
      sink: RunnerAddress,
      send: (client: Effect.Effect.Success<ReturnType<typeof connect>>) => Effect.Effect<A, E | RpcClientError>
    ): Effect.Effect<A, Exclude<E, RpcClientError | SocketError> | SinkUnreachable> =>
      Effect.scoped(Effect.flatMap(RcMap.get(clients, sink), send)).pipe(
        Effect.catchIf(
          (error): error is RpcClientError | SocketError => error._tag === "RpcClientError" || isSocketError(error),
          (error) => Effect.fail(unreachable(sink)(error.message))
        ),
        Effect.catchAllDefect((defect) => Effect.fail(unreachable(sink)(String(defect))))
      )
    const inProcess = (sink: RunnerAddress) => Equal.equals(sink, own.address)
    return SinkClients.of({
      inProcess,
      push: (sink, turn, chunks) => inProcess(sink) ? own.deliver(turn, chunks) : call(sink, (client) => client.Push({ turn, chunks })),
      serve: (sink, turn) => call(sink, (client) => client.Serve(turn)),
      serveOneOff: (sink, oneOff) => call(sink, (client) => client.ServeOneOff(oneOff)),
      serveDecision: (sink, decision) => call(sink, (client) => client.ServeDecision(decision))
    })
  })
)

/**
 * The owner side of a turn: its stamped chunks pushed to `sink`, a message per stream chunk (each
 * push awaited, so the chunks arrive in order and all of them before the turn's answer). The turn
 * stops when its entry no longer awaits it; a sink that cannot be reached fails it with
 * EngineUnavailable naming `what` (nobody may be left to read it: the entry is gone).
 *
 * A message takes the stream's chunk as it comes: the runtime's stream already carries, in one
 * chunk, what the engine child sent while the previous push was in flight. Only a remote sink with
 * a `hold` (`--cluster-hold`) has its chunks coalesced (Coalesce.ts): that costs the first token a
 * hop through a second fiber (~0.2 ms in bench/_cluster-path.ts), so nothing else pays it.
 */
export const pushTo = (pusher: SinkClients["Type"], sink: RunnerAddress, turn: string, what: string, wire: CoalesceOptions = {}) =>
<E, R>(chunks: Stream.Stream<TurnChunk, E, R>): Effect.Effect<TurnEnd, E | EngineUnavailable, R> =>
  Effect.suspend(() => {
    let pushed = 0
    const held = !pusher.inProcess(sink) && !Duration.isZero(Duration.decode(wire.hold ?? 0))
    return Stream.chunks(held ? coalesce(wire)(chunks) : chunks).pipe(
      Stream.runForEachWhile((batch) =>
        pusher.push(sink, turn, Chunk.toReadonlyArray(batch)).pipe(
          Effect.mapError((lost) => new EngineUnavailable({ reason: `${what}, turn ${turn}: ${lost.message}` })),
          Effect.map((wanted) => {
            pushed += batch.length
            return wanted
          })
        )
      ),
      Effect.map(() => ({ chunks: pushed }))
    )
  })

/**
 * The entry side of a turn: an inbox in `sink`, the turn sent naming it, and the chunks as they
 * arrive. The stream ends when the turn answers (every chunk it pushed received: the pushes were
 * answered before it; a count that differs is a defect), or fails as the turn does.
 */
export const receive = <E>(
  sink: TurnSink["Type"],
  turn: string,
  send: (sink: RunnerAddress) => Effect.Effect<TurnEnd, E>
): Stream.Stream<TurnChunk, E> =>
  Stream.unwrapScoped(Effect.gen(function*() {
    const inbox = yield* sink.open<E>(turn)
    yield* send(sink.address).pipe(
      Effect.exit,
      Effect.flatMap((exit) =>
        Exit.isSuccess(exit) && exit.value.chunks !== inbox.received()
          ? inbox.chunks.failCause(Cause.die(new Error(`turn ${turn}: ${exit.value.chunks} chunks pushed, ${inbox.received()} received`)))
          : inbox.chunks.done(Exit.asVoid(exit))
      ),
      Effect.forkScoped
    )
    return Mailbox.toStream(inbox.chunks)
  }))
