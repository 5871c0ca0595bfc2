/**
 * The conversation entity: one per conversation id, living on the runner whose shard holds the
 * id, so every turn of a conversation runs where its KV is. `Turn` runs a generation on that
 * runner's own Provider and streams its chunks, each stamped with the turn's id, its ordinal
 * (`index`) and the ordinal of its first generated token (`seq`), so the entry runner can prove
 * that what it passes on is one unbroken stream (RoutingProvider). Turns are volatile messages
 * (not persisted): a turn is never replayed from storage. The chunks go as the runtime batches
 * them (one message per engine chunk, not per token).
 */
import * as Entity from "@effect/cluster/Entity"
import * as Rpc from "@effect/rpc/Rpc"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import { GenerateChunk, GenerateRequest } from "../domain/Inference.js"
import { Conversations } from "../services/Conversations.js"
import { Provider } from "../services/Provider.js"
import { ProviderError } from "../services/ProviderError.js"
import { Placement } from "./Placement.js"

/** One chunk of a turn with its place in the turn. */
export const TurnChunk = Schema.Struct({
  /** The turn's id (made by the entry runner). */
  turn: Schema.String,
  /** The chunk's ordinal in the turn, from 0. */
  index: Schema.NonNegativeInt,
  /** The ordinal of the chunk's first generated token in the turn, from 0 (tokens before it: `seq`). */
  seq: Schema.NonNegativeInt,
  chunk: GenerateChunk
})
export type TurnChunk = typeof TurnChunk.Type

/** The generated tokens a chunk carries. */
export const tokenCount = (chunk: GenerateChunk): number => chunk._tag === "Done" ? 0 : chunk.tokens.length

export const Conversation = Entity.make("Conversation", [
  Rpc.make("Turn", {
    payload: { turn: Schema.String, request: GenerateRequest },
    success: TurnChunk,
    error: ProviderError,
    stream: true
  })
])

/** Stamps a turn's chunks with their index and first token's seq. */
export const stamp = (turn: string) => <E, R>(chunks: Stream.Stream<GenerateChunk, E, R>): Stream.Stream<TurnChunk, E, R> =>
  Stream.mapAccum(chunks, { index: 0, seq: 0 }, (at, chunk) => [
    { index: at.index + 1, seq: at.seq + tokenCount(chunk) },
    { turn, index: at.index, seq: at.seq, chunk }
  ])

/**
 * The entity's handlers over the runner's local Provider. Turns of one conversation run one at a
 * time, in arrival order; an idle entity is dropped after `maxIdleTime` (the conversation's KV
 * stays in the runtime's slots and state files).
 */
export const layer = (options: { readonly maxIdleTime?: Duration.DurationInput } = {}) =>
  Conversation.toLayer(
    Effect.gen(function*() {
      const provider = yield* Provider
      const placement = yield* Placement
      // When the entity leaves this runner (its shard moves, or the runner drains), after its last
      // turn: the conversation's KV goes to its state file, for the next owner to restore.
      const conversations = yield* Conversations
      const { entityId } = yield* Entity.CurrentAddress
      yield* Effect.addFinalizer(() => conversations.handOver(entityId))
      return {
        Turn: ({ address, payload }) =>
          Stream.unwrap(Effect.as(
            placement.record(address.entityId),
            provider.generate(payload.request).pipe(stamp(payload.turn))
          ))
      }
    }),
    { maxIdleTime: options.maxIdleTime ?? "10 minutes", concurrency: 1 }
  )
