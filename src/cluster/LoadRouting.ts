/**
 * One-off generations (no conversation) and decisions go to the least loaded runner. The load of
 * a runner is its scheduler's running + queued requests: this runner's own now, the others' as
 * they last answered this runner's probe (Load.ts), corrected by what this runner knows sooner:
 * less the requests it sent there that finished since that answer, and never less than the
 * requests it has in flight there (so a burst does not all go to the runner that looked idle a
 * moment ago).
 * Ties go to this runner (no hop), then to a random one of the least loaded (so entries that see
 * the same view do not all pick the same runner). A runner whose engine is not ready or that
 * holds no shards (stopping, or not yet placed) is never picked. The request goes to the work
 * entity of one of the chosen runner's shards (WorkEntity.ts); a generation sent there is checked
 * chunk by chunk as a conversation's turn is (RoutingProvider.exactlyOnce).
 *
 * Generations with a conversation are not this module's: they pass through to the Provider below
 * (RoutingProvider sends them to their conversation's entity before they reach it).
 */
import type { AlreadyProcessingMessage, MailboxFull, PersistenceError } from "@effect/cluster/ClusterError"
import { Sharding } from "@effect/cluster/Sharding"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Stream from "effect/Stream"
import * as Crypto from "node:crypto"
import { EngineUnavailable } from "../domain/EngineError.js"
import type { DecideRequest, GenerateChunk, GenerateRequest } from "../domain/Inference.js"
import { Provider } from "../services/Provider.js"
import type { ProviderError } from "../services/ProviderError.js"
import { type HeardLoad, Loads, pending, type RunnerLoad } from "./Load.js"
import { conversationOf, exactlyOnce } from "./RoutingProvider.js"
import { idsByShard, Work } from "./WorkEntity.js"

/** What this runner knows of another runner's load sooner than its published row. */
export interface Known {
  /** Requests this runner has in flight there. */
  readonly sent: ReadonlyMap<string, number>
  /** Requests this runner sent there that finished since the answer with this stamp. */
  readonly finished: ReadonlyMap<string, { readonly stamp: number; readonly count: number }>
}

/** Another runner's load as this runner reckons it. */
export const reckoned = (l: HeardLoad, known: Known) => {
  const finished = known.finished.get(l.address)
  const since = finished?.stamp === l.stamp ? finished.count : 0
  return Math.max(pending(l) - since, known.sent.get(l.address) ?? 0)
}

/**
 * The runner to send a one-off to: this one (undefined) or another's load; `random` picks among
 * equals (in [0, 1)).
 */
export const choose = (
  own: RunnerLoad,
  others: ReadonlyArray<HeardLoad>,
  known: Known,
  random: () => number
): HeardLoad | undefined => {
  const usable = others.filter((l) => l.ready && l.shards.length > 0 && l.address !== own.address)
  const load = (l: HeardLoad) => reckoned(l, known)
  const least = usable.reduce((min, l) => Math.min(min, load(l)), Infinity)
  if (own.ready && pending(own) <= least) return undefined
  if (usable.length === 0) return undefined
  const best = usable.filter((l) => load(l) === least)
  return best[Math.min(best.length - 1, Math.floor(random() * best.length))]
}

const refusal = (what: string) => (error: MailboxFull | AlreadyProcessingMessage | PersistenceError): ProviderError =>
  new EngineUnavailable({
    reason: error._tag === "MailboxFull"
      ? `${what}: the chosen runner's mailbox is full`
      : error._tag === "AlreadyProcessingMessage"
      ? `${what}: the chosen runner is already processing it`
      : `${what}: the cluster storage failed (${error.message})`
  })

/** The Provider over the local one (the Provider in context) that sends one-offs and decisions by load. */
export const make = (shards: number) =>
  Effect.gen(function*() {
    const local = yield* Provider
    const loads = yield* Loads
    const sharding = yield* Sharding
    const clientFor = yield* Work.client
    const ids = idsByShard(sharding, shards)
    const known = { sent: new Map<string, number>(), finished: new Map<string, { stamp: number; count: number }>() }
    const start = (address: string) => Effect.sync(() => void known.sent.set(address, (known.sent.get(address) ?? 0) + 1))
    const end = (address: string) =>
      Effect.map(loads.others, (others) => {
        const n = (known.sent.get(address) ?? 1) - 1
        if (n === 0) known.sent.delete(address)
        else known.sent.set(address, n)
        const stamp = others.find((l) => l.address === address)?.stamp
        if (stamp === undefined) return
        const before = known.finished.get(address)
        known.finished.set(address, { stamp, count: before?.stamp === stamp ? before.count + 1 : 1 })
      })

    /** The chosen runner and the work entity id of one of its shards; undefined for this runner. */
    const target = Effect.gen(function*() {
      const chosen = choose(yield* loads.own, yield* loads.others, known, Math.random)
      if (chosen === undefined) return undefined
      const shard = chosen.shards[Math.floor(Math.random() * chosen.shards.length)]!
      return { address: chosen.address, id: ids[shard - 1]! }
    })

    /** Counts the request on its runner while it runs. */
    const whileSent = (address: string) => <A, E, R>(effect: Effect.Effect<A, E, R>) =>
      Effect.acquireUseRelease(start(address), () => effect, () => end(address))

    const generate = (request: GenerateRequest): Stream.Stream<GenerateChunk, ProviderError> => {
      if (conversationOf(request) !== undefined) return local.generate(request)
      return Stream.unwrapScoped(Effect.gen(function*() {
        const to = yield* target
        if (to === undefined) return local.generate(request)
        const turn = Crypto.randomUUID()
        yield* Effect.acquireRelease(start(to.address), () => end(to.address))
        return clientFor(to.id).Generate({ turn, request }).pipe(
          Stream.catchTags({
            MailboxFull: (e) => Stream.fail(refusal("a generation")(e)),
            AlreadyProcessingMessage: (e) => Stream.fail(refusal("a generation")(e)),
            PersistenceError: (e) => Stream.fail(refusal("a generation")(e))
          }),
          exactlyOnce(`(a one-off sent to ${to.address})`, turn)
        )
      }))
    }

    const decide = (request: DecideRequest) =>
      Effect.flatMap(target, (to) =>
        to === undefined
          ? local.decide(request)
          : clientFor(to.id).Decide({ request }).pipe(
            Effect.catchTags({
              MailboxFull: (e) => Effect.fail(refusal("a decision")(e)),
              AlreadyProcessingMessage: (e) => Effect.fail(refusal("a decision")(e)),
              PersistenceError: (e) => Effect.fail(refusal("a decision")(e))
            }),
            whileSent(to.address)
          ))

    return Provider.of({ ...local, generate, decide })
  })

/** Replaces the Provider in context with one that sends one-offs and decisions by load. */
export const layer = (shards: number): Layer.Layer<Provider, never, Provider | Loads | Sharding> =>
  Layer.effect(Provider, make(shards))
