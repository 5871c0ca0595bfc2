/**
 * The entry runner's rules for one turn or decision it sends to another runner (or to an entity
 * of its own), whichever way it goes: straight to the runner's sink, or through the cluster.
 *
 * Exactly once: each turn gets an id, and its chunks must arrive as one unbroken stream (index
 * 0, 1, 2, ... with `seq` counting the tokens before each). @effect/cluster re-sends a volatile
 * request whose runner became unavailable to the shard's next owner, which would silently run the
 * turn again from its start; such a restart shows as a chunk out of order (TurnRestarted), and is
 * never passed on. When the cluster drops a runner (its health check failed, or its heartbeat went
 * stale), it closes its connection to it, and a turn streaming from it, or waiting to be sent to
 * it, ends interrupted rather than re-sent; a turn whose request or chunks met that connection as
 * it broke ends with the socket's error (a defect of the RPC protocol).
 *
 * A turn so lost before its first chunk is sent again (a new turn id) and waits for the shard's
 * next owner; one lost after chunks were delivered is resumed where it is deterministic
 * (TurnChunk.stampResumed: run again, the delivered chunks checked and dropped), else it fails with
 * `GenerationFailed { deliveredTokens }`: nothing is delivered twice, skipped or re-run silently.
 */
import type { AlreadyProcessingMessage, MailboxFull, PersistenceError } from "@effect/cluster/ClusterError"
import type { RunnerAddress } from "@effect/cluster/RunnerAddress"
import { isSocketError } from "@effect/platform/Socket"
import * as Cause from "effect/Cause"
import * as Channel from "effect/Channel"
import * as Chunk from "effect/Chunk"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import * as Crypto from "node:crypto"
import { EngineUnavailable, GenerationFailed } from "../domain/EngineError.js"
import type { GenerateChunk } from "../domain/Inference.js"
import { observeChunks } from "../internal/ChunkTap.js"
import type { ProviderError } from "../services/ProviderError.js"
import type { NotOwner, SinkUnreachable } from "./ChunkChannel.js"
import { tokenCount, type TurnChunk, type TurnResume } from "./TurnChunk.js"

/**
 * The cluster started a turn again on another runner (its runner was lost, and @effect/cluster
 * re-sent the volatile request): a chunk came out of order after `deliveredTokens` tokens.
 */
export class TurnRestarted extends Data.TaggedError("TurnRestarted")<{
  readonly deliveredTokens: number
  readonly detail: string
}> {}

/**
 * Passes a turn's chunks on while they continue the stream exactly (same turn, next index, next
 * seq, from `from`: where a resumed turn starts); fails with TurnRestarted at the first that does
 * not. The stream ends with its Done chunk.
 */
export const exactlyOnce = (turn: string, from: { readonly index: number; readonly seq: number } = { index: 0, seq: 0 }) =>
<E, R>(chunks: Stream.Stream<TurnChunk, E, R>): Stream.Stream<GenerateChunk, E | TurnRestarted, R> =>
  Stream.suspend(() => {
    let index = from.index
    let seq = from.seq
    // One channel, one check per batch (no stream per batch): the valid part of a batch is
    // delivered, then the failure; after Done the turn is whole, and the upstream is not read
    // again (whatever a restart sends after it is not passed on).
    const checked: Channel.Channel<Chunk.Chunk<GenerateChunk>, Chunk.Chunk<TurnChunk>, E | TurnRestarted, E, unknown, unknown> =
      Channel.readWithCause({
        onInput: (batch: Chunk.Chunk<TurnChunk>) => {
          const out: Array<GenerateChunk> = []
          let done = false
          let failure: TurnRestarted | undefined
          for (const c of batch) {
            if (c.turn !== turn || c.index !== index || c.seq !== seq) {
              failure = new TurnRestarted({
                deliveredTokens: seq,
                detail: `chunk ${c.index} at token ${c.seq} of turn ${c.turn} came after chunk ${index - 1}`
              })
              break
            }
            index++
            seq += tokenCount(c.chunk)
            out.push(c.chunk)
            if (c.chunk._tag === "Done") {
              done = true
              break
            }
          }
          const written = out.length === 0 ? Channel.void : Channel.write(Chunk.unsafeFromArray(out))
          if (failure !== undefined) return Channel.zipRight(written, Channel.fail(failure))
          return done ? written : Channel.zipRight(written, checked)
        },
        onFailure: Channel.failCause,
        onDone: () => Channel.void
      })
    return Stream.pipeThroughChannel(chunks, checked)
  })

/**
 * Whether a turn's stream ended because its runner was lost: interrupted (the cluster dropped the
 * runner and closed its connection), or the connection to it failed under the turn (the RPC
 * protocol dies with the socket's error when it writes to a runner that is gone).
 */
export const runnerLost = (cause: Cause.Cause<unknown>): boolean => {
  if (Cause.isInterruptedOnly(cause)) return true
  const defects = Chunk.toReadonlyArray(Cause.defects(cause))
  return Chunk.isEmpty(Cause.failures(cause)) && defects.length > 0 && defects.every(isSocketError)
}

/** How many times a turn lost before its first token is sent again (each waits for the shard's next owner). */
export const lostTurnRetries = 4

type ClusterRefusal = MailboxFull | AlreadyProcessingMessage | PersistenceError

/** What the cluster refuses a request (`what`: "conversation X", "a one-off generation") with, as the runtime's own errors. */
const refusal = (what: string) =>
(error: ClusterRefusal): ProviderError =>
  new EngineUnavailable({
    reason: error._tag === "MailboxFull"
      ? `${what}: its runner's mailbox is full`
      : error._tag === "AlreadyProcessingMessage"
      ? `${what}: its runner is already processing it`
      : `${what}: the cluster storage failed (${error.message})`
  })

/** An entity call (for `what`) with the cluster's refusals as the runtime's own errors. */
export const refusedAsProviderErrors = (what: string) =>
<A, R>(call: Effect.Effect<A, ProviderError | ClusterRefusal, R>): Effect.Effect<A, ProviderError, R> =>
  Effect.catchTags(call, {
    MailboxFull: (e) => Effect.fail(refusal(what)(e)),
    AlreadyProcessingMessage: (e) => Effect.fail(refusal(what)(e)),
    PersistenceError: (e) => Effect.fail(refusal(what)(e))
  })

/** The two ways one try of a turn can go, each streaming the turn's chunks as its runner pushes them. */
export interface TurnRoutes {
  /** The sink of the runner that holds the conversation, as the loads name it; none where this runner holds it or it is not known. */
  readonly owner: Effect.Effect<RunnerAddress | undefined>
  /** Straight to the owner's sink (its runner refuses with NotOwner where the shard moved). */
  readonly direct: (
    owner: RunnerAddress,
    turn: string,
    resume: TurnResume | undefined
  ) => Stream.Stream<TurnChunk, ProviderError | NotOwner | SinkUnreachable>
  /** Through the conversation's entity, wherever the cluster places it (its refusals as the runtime's errors: `refusedAsProviderErrors`). */
  readonly viaCluster: (turn: string, resume: TurnResume | undefined) => Stream.Stream<TurnChunk, ProviderError>
}

/**
 * A decision with the entry's rules: straight to the chosen runner (`direct`, where its load
 * answer names its sink), else through the cluster; a direct decision that its runner refuses
 * (NotOwner: it holds no shard, it is stopping) or whose sink cannot be reached goes through the
 * cluster instead (a decision changes nothing on its runner: sending it again is safe). Its own
 * failures (a refused request, the engine's errors) are the caller's, not sent again.
 */
export const routedDecision = <A>(
  direct: Effect.Effect<A, ProviderError | NotOwner | SinkUnreachable> | undefined,
  viaCluster: Effect.Effect<A, ProviderError>
): Effect.Effect<A, ProviderError> =>
  direct === undefined ? viaCluster : Effect.catchTags(direct, { NotOwner: () => viaCluster, SinkUnreachable: () => viaCluster })

/**
 * A turn (of a conversation, or a one-off: `what` names it in errors) with the entry's rules:
 * straight to its runner where the loads name one, else through its entity. A direct turn that
 * its runner refuses (NotOwner: the shard moved) or that cannot reach it before any chunk goes
 * through the entity instead. A turn whose runner was lost before any chunk is sent again (a new
 * turn id); one lost after chunks were delivered is resumed through the cluster where it `resumes`
 * (TurnChunk.resumable: its next runner runs it again and sends on only what follows them, TurnChunk.stampResumed),
 * else it fails with GenerationFailed naming the delivered tokens. Either way at most
 * `lostTurnRetries` tries after the first (re-sends and resumptions together; a fall-back from a
 * direct try to the entity is not one).
 */
export const routedTurn = (what: string, routes: TurnRoutes, resumes = false): Stream.Stream<GenerateChunk, ProviderError> =>
  Stream.suspend(() => {
    /** Times the turn was resumed (a re-send before any chunk is not one). */
    let resumptions = 0
    const attempt = (tries: number, direct: boolean, resume: TurnResume | undefined): Stream.Stream<GenerateChunk, ProviderError> =>
      Stream.unwrap(Effect.gen(function*() {
        const owner = direct ? yield* routes.owner : undefined
        const turn = Crypto.randomUUID()
        let chunks = resume?.chunks ?? 0
        let delivered = resume?.tokens.length ?? 0
        // The delivered tokens themselves are kept only where the turn may be resumed.
        const tokens: Array<number> = [...(resume?.tokens ?? [])]
        const sent: Stream.Stream<TurnChunk, ProviderError | NotOwner | SinkUnreachable> = owner === undefined
          ? routes.viaCluster(turn, resume)
          : routes.direct(owner, turn, resume)
        /** The runner serving the turn was lost (`how`): sent again, resumed, or failed, by what was delivered. */
        const lost = (how: string): Stream.Stream<GenerateChunk, ProviderError> => {
          if (chunks === 0) {
            // Nothing delivered: sent again, to the shard's next owner.
            return tries < lostTurnRetries
              ? attempt(tries + 1, false, undefined)
              : Stream.fail(new EngineUnavailable({ reason: `${what}: its runner was lost ${tries + 1} times before the turn began` }))
          }
          if (resumes && tries < lostTurnRetries) {
            resumptions++
            return Stream.unwrap(Effect.as(
              Effect.logInfo(`${what}: the runner serving turn ${turn} was lost after ${delivered} tokens (${how}); resumed`),
              attempt(tries + 1, false, { chunks, tokens: [...tokens] })
            ))
          }
          return Stream.fail(new GenerationFailed({
            deliveredTokens: delivered,
            reason: `${what}: the runner serving turn ${turn} was lost after ${delivered} tokens (${how}); ` +
              (resumes ? `resumed ${resumptions} times, not again` : "the turn was stopped, not re-run")
          }))
        }
        return sent.pipe(
          exactlyOnce(turn, { index: chunks, seq: delivered }),
          observeChunks((batch) => {
            for (const chunk of batch) {
              chunks++
              if (chunk._tag === "Done") continue
              delivered += chunk.tokens.length
              if (resumes) tokens.push(...chunk.tokens)
            }
          }),
          Stream.catchTags({
            // The tokens the client has are the entry's count (a resumed turn's runner counts its re-run's).
            GenerationFailed: (e) =>
              Stream.fail(e.deliveredTokens === delivered ? e : new GenerationFailed({ deliveredTokens: delivered, reason: e.reason })),
            // Before any chunk (its owner checks the shard first): through the entity instead.
            NotOwner: () => attempt(tries, false, resume),
            SinkUnreachable: (e) => chunks === (resume?.chunks ?? 0) ? attempt(tries, false, resume) : lost(e.message),
            TurnRestarted: (e) => lost(`the cluster started it again: ${e.detail}`)
          }),
          Stream.catchAllCause((cause) =>
            // Our own interruption is not caught here; an interruption that ends the turn's stream
            // is the cluster dropping the runner that served it (its connection is closed).
            runnerLost(cause) ? lost("its connection was closed") : Stream.failCause(cause)
          )
        )
      }))
    return attempt(0, true, undefined)
  })
