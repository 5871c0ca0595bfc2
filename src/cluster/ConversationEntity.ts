/**
 * The conversation entity: one per conversation id, living on the runner whose shard holds the
 * id, so every turn of a conversation runs where its KV is. `Turn` runs a generation on that
 * runner's own Provider and pushes its chunks straight to the entry runner's sink (ChunkChannel),
 * each stamped with the turn's id, its ordinal (`index`) and the ordinal of its first generated
 * token (`seq`), so the entry runner can prove that what it passes on is one unbroken stream
 * (RoutingProvider); it answers once they are all pushed. Turns are volatile messages (not
 * persisted): a turn is never replayed from storage. The chunks go as the runtime batches them
 * (a push per stream chunk, ChunkChannel.pushTo): the first at once, then each push carries every
 * chunk ready when it leaves (and, with a hold, what comes within it). Since a turn is a
 * request-response call, an entity that closes while one runs (its shard moving to a joining
 * runner) waits for it to end instead of cutting it.
 *
 * A conversation outlives its runner: each turn's messages and reply are recorded under the
 * checkpoint it ended with (Transcripts). When a turn comes with a checkpoint this runner cannot
 * verify (the conversation was served by a runner that died, whose KV and token records died with
 * it), and the cluster gave that checkpoint out, the turn is recomputed from the transcript: the
 * request's own messages when they hold the history, else the recorded ones followed by the new
 * turn. The runtime then reports the reuse it found (`cold`, or `prefix`); with state files shared
 * between the runners, a checkpoint whose state file was saved (its slot taken over, or a graceful
 * stop) verifies from that file and restores it (`restored`) without coming here.
 *
 * A runner that stops lets its turns in flight end before the entities close (Drain.ts); each
 * entity then hands its conversation over (its KV to its state file) as it closes.
 *
 * A turn sent straight to this runner runs on an active entity in process (ActiveConversations),
 * not through Sharding: the entity orders such turns with Sharding's (one at a time), lets the one
 * it runs end before it hands over, and refuses any that reach it once closed (NotOwner).
 */
import * as Entity from "@effect/cluster/Entity"
import * as EntityId from "@effect/cluster/EntityId"
import type { Sharding } from "@effect/cluster/Sharding"
import type * as ShardId from "@effect/cluster/ShardId"
import * as Rpc from "@effect/rpc/Rpc"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import { type ChatMessage, GenerateChunk, GenerateRequest } from "../domain/Inference.js"
import { recordingReply } from "../http/KeyedConversations.js"
import { Conversations } from "../services/Conversations.js"
import { Provider } from "../services/Provider.js"
import { type InvalidCheckpoint, ProviderError } from "../services/ProviderError.js"
import { ActiveConversations } from "./ActiveConversations.js"
import { NotOwner, pushTo, SinkClients, TurnEnd, TurnPayload } from "./ChunkChannel.js"
import type { CoalesceOptions } from "./Coalesce.js"
import { Drain } from "./Drain.js"
import { Placement } from "./Placement.js"
import { Transcripts } from "./Transcripts.js"
import { stampResumed } from "./TurnChunk.js"

export const Conversation = Entity.make("Conversation", [
  /** A turn: its chunks are pushed to `sink` (the entry's, ChunkChannel) while it runs; it answers when they all are. */
  Rpc.make("Turn", {
    payload: TurnPayload,
    success: TurnEnd,
    error: ProviderError
  })
])

/** The shard `conversation`'s entity lives in, by Sharding's own hash. */
export const conversationShard = (sharding: Sharding["Type"], conversation: string): ShardId.ShardId => {
  const id = EntityId.make(conversation)
  return sharding.getShardId(id, Conversation.getShardGroup(id))
}

/** Whether a turn's messages carry the conversation's history (an assistant message), not only the new turn. */
const holdsHistory = (messages: ReadonlyArray<ChatMessage>) => messages.some((m) => m.role === "assistant")

/**
 * The entity's handlers over the runner's local Provider. Turns of one conversation run one at a
 * time, in arrival order; an idle entity is dropped after `maxIdleTime` (the conversation's KV
 * stays in the runtime's slots and state files).
 */
export const layer = (options: { readonly maxIdleTime?: Duration.DurationInput; readonly wire?: CoalesceOptions } = {}) => {
  const maxIdleTime = options.maxIdleTime ?? "10 minutes"
  return Conversation.toLayer(
    Effect.gen(function*() {
      const wire = options.wire ?? {}
      const provider = yield* Provider
      const placement = yield* Placement
      // Turns run one at a time, whether Sharding delivered them or they came straight to this
      // runner (ActiveConversations): Sharding's own ordering covers only the former.
      const oneAtATime = yield* Effect.makeSemaphore(1)
      let closed = false
      // When the entity leaves this runner (its shard moves, or the runner drains), after its last
      // turn: the conversation's KV goes to its state file, for the next owner to restore.
      const conversations = yield* Conversations
      const { entityId } = yield* Entity.CurrentAddress
      yield* Effect.addFinalizer(() =>
        oneAtATime.withPermits(1)(Effect.suspend(() => {
          closed = true
          return conversations.handOver(entityId)
        }))
      )
      // Where the conversation is served, recorded once per activation of the entity (in the
      // background), not per turn: while the entity lives here no other runner serves the
      // conversation (its shard would have moved, which closes the entity), and a turn's start is
      // not the moment for a storage write (libsql's statements hold the event loop).
      yield* placement.record(entityId)
      const transcripts = yield* Transcripts
      const drain = yield* Drain
      const pusher = yield* SinkClients
      const active = yield* ActiveConversations

      /**
       * A turn computed from `messages` (its history and the new turn), whose Done chunk goes out
       * once the transcript with its reply is recorded. With no messages known (a turn that sent
       * only its new messages, continuing a transcript that is not recorded), nothing is recorded.
       */
      const recorded = (conversation: string, request: GenerateRequest, messages: Effect.Effect<ReadonlyArray<ChatMessage> | undefined>) =>
        request.prompt !== undefined ? provider.generate(request) : provider.generate(request).pipe(
          recordingReply((reply, checkpoint) =>
            Effect.flatMap(messages, (known) => known === undefined ? Effect.void : transcripts.record(conversation, [...known, reply], checkpoint))
          )
        )

      /** The turn's messages with its history: its own, or the transcript recorded with its checkpoint before them. */
      const withHistory = (request: GenerateRequest) =>
        request.checkpoint === undefined || holdsHistory(request.messages)
          ? Effect.succeed(request.messages)
          : Effect.map(transcripts.lookup(request.checkpoint), (history) => history && [...history, ...request.messages])

      /** A turn whose checkpoint this runner cannot verify: recomputed from the transcript, if the cluster gave the checkpoint out. */
      const recompute = (conversation: string, request: GenerateRequest, refused: InvalidCheckpoint) =>
        Stream.unwrap(Effect.gen(function*() {
          const checkpoint = request.checkpoint
          const history = checkpoint === undefined ? undefined : yield* transcripts.lookup(checkpoint)
          if (history === undefined) return Stream.fail(refused)
          const messages = holdsHistory(request.messages) ? request.messages : [...history, ...request.messages]
          const { checkpoint: _, ...plain } = request
          yield* Effect.logInfo(`conversation ${conversation}: checkpoint unknown on this runner (${refused.reason}); recomputed from its transcript`)
          return recorded(conversation, { ...plain, conversation, messages }, Effect.succeed(messages))
        }))

      const turn = (conversation: string, request: GenerateRequest): Stream.Stream<GenerateChunk, ProviderError> =>
        recorded(conversation, request, withHistory(request)).pipe(
          // The checkpoint is checked before any output: nothing was delivered when this is refused.
          Stream.catchTag("InvalidCheckpoint", (refused) => recompute(conversation, request, refused))
        )

      const run = (payload: TurnPayload) =>
        drain.track(Stream.suspend(() => turn(entityId, payload.request).pipe(stampResumed(payload.turn, payload.resume)))).pipe(
          pushTo(pusher, payload.sink, payload.turn, `conversation ${entityId}`, wire)
        )
      // Sharding sees only the turns it delivers, and closes an entity idle in its view for
      // `maxIdleTime` (its KV then goes to the state file). So once half that has passed since it
      // last delivered one, the next turn goes through it, not in process: a conversation busy
      // with direct turns keeps its entity.
      const clock = yield* Effect.clock
      const refreshAfter = Duration.toMillis(Duration.decode(maxIdleTime)) / 2
      let lastDelivered = clock.unsafeCurrentTimeMillis()
      const deliveredLately = () => clock.unsafeCurrentTimeMillis() - lastDelivered < refreshAfter
      // Registered after the hand-over's finalizer, so it leaves the registry before that runs.
      yield* active.register(
        entityId,
        (payload) =>
          oneAtATime.withPermits(1)(Effect.suspend((): Effect.Effect<TurnEnd, ProviderError | NotOwner> =>
            closed ? Effect.fail(new NotOwner({ conversation: entityId })) : run(payload)
          )),
        deliveredLately
      )
      return {
        Turn: ({ payload }) =>
          oneAtATime.withPermits(1)(run(payload)).pipe(Effect.ensuring(Effect.sync(() => void (lastDelivered = clock.unsafeCurrentTimeMillis()))))
      }
    }),
    { maxIdleTime, concurrency: 1 }
  )
}
