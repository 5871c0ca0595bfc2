/**
 * The preparation entity: `prepare` of a conversation (Provider.prepare: its expected next prompt
 * prefilled while the engine is idle) on the runner that holds the conversation, so the turn that
 * follows finds it there (reuse `prepared`) wherever the client sent either. Its ids are
 * conversation ids, as the conversation entity's are, and both are in the default shard group, so
 * a preparation lands in the same shard, on the same runner, as the conversation's turns. It is an
 * entity of its own so that a turn arriving while a preparation runs is not queued behind it in
 * the conversation entity's mailbox: the runtime's turn preempts the preparation at its next chunk,
 * as on one server.
 */
import * as Entity from "@effect/cluster/Entity"
import * as Rpc from "@effect/rpc/Rpc"
import * as Effect from "effect/Effect"
import { PrepareRequest, PrepareResult } from "../domain/Inference.js"
import { Provider } from "../services/Provider.js"
import { ProviderError } from "../services/ProviderError.js"

export const Preparation = Entity.make("Preparation", [
  Rpc.make("Prepare", { payload: PrepareRequest, success: PrepareResult, error: ProviderError })
])

/** The handler over the runner's local Provider; one preparation of a conversation at a time. */
export const layer = Preparation.toLayer(
  Effect.gen(function*() {
    const provider = yield* Provider
    return { Prepare: ({ payload }) => provider.prepare(payload) }
  }),
  { maxIdleTime: "1 minute" }
)
