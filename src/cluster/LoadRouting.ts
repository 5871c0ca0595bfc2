/**
 * One-off generations (no conversation) and decisions go to the least loaded runner. The load of
 * a runner is its scheduler's running + queued requests: this runner's own now, the others' as
 * they last answered this runner's probe (Load.ts), corrected by what this runner knows sooner,
 * by request id (an answer lists the requests it runs for other runners): less the requests it
 * sent there that the answer lists but that have ended since, plus those it sent there that the
 * answer does not list yet (so a burst does not all go to the runner that looked idle a moment
 * ago, and an answer taken before a request ended does not count it after its end, however late
 * it arrives).
 * Ties go to this runner (no hop), then to a random one of the least loaded (so entries that see
 * the same view do not all pick the same runner). A runner whose engine is not ready or that
 * holds no shards (stopping, or not yet placed) is never picked. A generation goes straight to the
 * chosen runner's sink where its load answer names one (ChunkChannel's `ServeOneOff`; it runs
 * there through the work entity of a shard that runner holds, DirectServer.ts), else through the
 * cluster to the work entity of one of its shards (WorkEntity.ts); either way its chunks are
 * checked as a conversation turn's are, with the same fall-backs and re-sends
 * (RoutedTurn.routedTurn). A decision goes the same two ways (`ServeDecision`, or through
 * the cluster to the work entity; RoutedTurn.routedDecision).
 *
 * Generations with a conversation are not this module's: they pass through to the Provider below
 * (RoutingProvider sends them to their conversation's entity before they reach it).
 */
import { Sharding } from "@effect/cluster/Sharding"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Stream from "effect/Stream"
import * as Crypto from "node:crypto"
import type { DecideRequest, GenerateChunk, GenerateRequest } from "../domain/Inference.js"
import { tapChunks } from "../internal/ChunkTap.js"
import { Provider } from "../services/Provider.js"
import type { ProviderError } from "../services/ProviderError.js"
import { payload, receive, SinkClients, TurnSink } from "./ChunkChannel.js"
import { Loads, pending, type RunnerLoad } from "./Load.js"
import { refusedAsProviderErrors, routedDecision, routedTurn } from "./RoutedTurn.js"
import { conversationOf } from "./RoutingProvider.js"
import { resumable, type TurnChunk } from "./TurnChunk.js"
import { idsByShard, Work } from "./WorkEntity.js"

/** What this runner knows of another runner's load sooner than its answers, by request id. */
export interface Known {
  /** The requests this runner has in flight there. */
  readonly sent: ReadonlyMap<string, ReadonlySet<string>>
  /** Requests this runner sent there that have ended (kept a while: an answer may arrive late). */
  readonly ended: ReadonlyMap<string, Pick<ReadonlySet<string>, "has">>
}

/**
 * Another runner's load as this runner reckons it: its answer's running + queued, less the
 * requests of this runner that the answer still lists but that have ended since (however late the
 * answer arrived), plus those in flight there that the answer does not list yet (sent after it).
 */
export const reckoned = (l: RunnerLoad, known: Known) => {
  const listed = new Set(l.serving)
  const ended = known.ended.get(l.address)
  let gone = 0
  if (ended !== undefined) for (const id of listed) if (ended.has(id)) gone++
  let unseen = 0
  for (const id of known.sent.get(l.address) ?? []) if (!listed.has(id)) unseen++
  return Math.max(0, pending(l) - gone) + unseen
}

/**
 * How long an ended request is remembered: longer than an answer can take (the probe timeout, 1 s)
 * plus how long an answer is used (stale after 2 s), with a margin.
 */
export const keepEnded = 10_000

/** The Known of one entry runner, kept as its requests to other runners start and end. */
export const makeLedger = () => {
  const sent = new Map<string, Set<string>>()
  const ended = new Map<string, Map<string, number>>()
  const known: Known = { sent, ended }
  return {
    known,
    start: (address: string, id: string) => void sent.set(address, (sent.get(address) ?? new Set<string>()).add(id)),
    /**
     * Request `id` sent to `address` ended at `now` (ms), if it was in flight (a second end is
     * nothing); forgets those ended `keepEnded` before.
     */
    end: (address: string, id: string, now: number) => {
      const ids = sent.get(address)
      if (ids === undefined || !ids.delete(id)) return
      if (ids.size === 0) sent.delete(address)
      ended.set(address, (ended.get(address) ?? new Map<string, number>()).set(id, now))
      for (const [at, done] of ended) {
        for (const [id, when] of done) if (now - when > keepEnded) done.delete(id)
        if (done.size === 0) ended.delete(at)
      }
    }
  }
}

/**
 * The runner to send a one-off to: this one (undefined) or another's load; `random` picks among
 * equals (in [0, 1)).
 */
export const choose = (
  own: RunnerLoad,
  others: ReadonlyArray<RunnerLoad>,
  known: Known,
  random: () => number
): RunnerLoad | undefined => {
  const usable = others.filter((l) => l.ready && l.shards.length > 0 && l.address !== own.address)
  const load = (l: RunnerLoad) => reckoned(l, known)
  const least = usable.reduce((min, l) => Math.min(min, load(l)), Infinity)
  if (own.ready && pending(own) <= least) return undefined
  if (usable.length === 0) return undefined
  const best = usable.filter((l) => load(l) === least)
  return best[Math.min(best.length - 1, Math.floor(random() * best.length))]
}

/** The Provider over the local one (the Provider in context) that sends one-offs and decisions by load. */
export const make = (shards: number) =>
  Effect.gen(function*() {
    const local = yield* Provider
    const loads = yield* Loads
    const sharding = yield* Sharding
    const clientFor = yield* Work.client
    const sink = yield* TurnSink
    const clients = yield* SinkClients
    const ids = idsByShard(sharding, shards)
    const ledger = makeLedger()
    const known = ledger.known
    const start = (address: string, id: string) => Effect.sync(() => ledger.start(address, id))
    const end = (address: string, id: string) => Effect.sync(() => ledger.end(address, id, Date.now()))

    /** The chosen runner, the work entity id of one of its shards, and its sink (as its load answer names it); undefined for this runner. */
    const target = Effect.gen(function*() {
      const chosen = choose(yield* loads.own, yield* loads.others, known, Math.random)
      if (chosen === undefined) return undefined
      const shard = chosen.shards[Math.floor(Math.random() * chosen.shards.length)]!
      return { address: chosen.address, id: ids[shard - 1]!, sink: chosen.sink }
    })

    /** Counts request `id` on its runner while it runs. */
    const whileSent = (address: string, id: string) => <A, E, R>(effect: Effect.Effect<A, E, R>) =>
      Effect.acquireUseRelease(start(address, id), () => effect, () => end(address, id))

    const generate = (request: GenerateRequest): Stream.Stream<GenerateChunk, ProviderError> => {
      if (conversationOf(request) !== undefined) return local.generate(request)
      return Stream.unwrap(Effect.map(target, (to) => {
        if (to === undefined) return local.generate(request)
        /** Each try counted on the chosen runner while it runs; ended at its Done chunk (the caller may send the next request before the stream's scope closes). */
        const counted = <E>(turn: string, chunks: Stream.Stream<TurnChunk, E>) =>
          Stream.unwrapScoped(Effect.as(
            Effect.acquireRelease(start(to.address, turn), () => end(to.address, turn)),
            chunks.pipe(tapChunks((batch) => Chunk.some(batch, (c) => c.chunk._tag === "Done") ? end(to.address, turn) : Effect.void))
          ))
        // Straight to the chosen runner's sink where its load answer names one, else (or where it
        // holds no shard any more) through the work entity of one of its shards.
        const what = `a one-off generation sent to ${to.address}`
        return routedTurn(what, {
          owner: Effect.succeed(to.sink),
          direct: (at, turn, resume) => counted(turn, receive(sink, turn, (own) => clients.serveOneOff(at, payload(turn, request, own, resume)))),
          viaCluster: (turn, resume) =>
            counted(turn, receive(sink, turn, (own) => clientFor(to.id).Generate(payload(turn, request, own, resume)).pipe(refusedAsProviderErrors(what))))
        }, resumable(request))
      }))
    }

    const decide = (request: DecideRequest) =>
      Effect.flatMap(target, (to) => {
        if (to === undefined) return local.decide(request)
        const id = Crypto.randomUUID()
        return routedDecision(
          to.sink === undefined ? undefined : clients.serveDecision(to.sink, { id, request }),
          clientFor(to.id).Decide({ id, request }).pipe(refusedAsProviderErrors("a decision"))
        ).pipe(whileSent(to.address, id))
      })

    return Provider.of({ ...local, generate, decide })
  })

/** Replaces the Provider in context with one that sends one-offs and decisions by load. */
export const layer = (shards: number): Layer.Layer<Provider, never, Provider | Loads | Sharding | TurnSink | SinkClients> =>
  Layer.effect(Provider, make(shards))
