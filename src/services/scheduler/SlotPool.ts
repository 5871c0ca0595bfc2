/**
 * The generation context's sequences (slots), handed out in lane order: a waiter of a higher lane
 * is served first, and FIFO within a lane. A conversation keeps its slot between turns (its KV
 * cache is its reuse); when every free slot belongs to some conversation, the least recently
 * used one is taken over. The slots are a capacity behind the lane queue (internal/LaneQueue.ts):
 * a waiter that is interrupted leaves the queue; a slot is released exactly once, when the scope
 * that acquired it closes. A request without a conversation may also borrow a free slot that no
 * conversation owns, at once or not at all (`tryAcquire` with `unownedOnly`): it never waits in
 * this pool nor takes a conversation's slot over.
 */
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import type { Lane } from "../../domain/Inference.js"
import * as LaneQueue from "../../internal/LaneQueue.js"

export interface Grant {
  readonly slot: number
  /** The conversation whose slot was taken over, if any. */
  readonly evicted: string | undefined
}

export interface SlotRequest {
  readonly lane: Lane
  readonly conversation?: string | undefined
  /** Only a free slot that no conversation owns (never taking one over). */
  readonly unownedOnly?: boolean | undefined
}

export interface SlotPool {
  readonly acquire: (request: SlotRequest) => Effect.Effect<Grant, never, Scope.Scope>
  /** A slot for the request now, held for the scope, or undefined (nothing waited for) when none is free or others wait. */
  readonly tryAcquire: (request: SlotRequest) => Effect.Effect<Grant | undefined, never, Scope.Scope>
  readonly status: Effect.Effect<{ readonly busy: number; readonly waiting: number; readonly slots: number; readonly owned: number }>
  /** The slot a conversation owns now, if any. */
  readonly slotOf: (conversation: string) => number | undefined
}

export const make = (slots: number): Effect.Effect<SlotPool> =>
  Effect.sync(() => {
    const busy = new Set<number>()
    /** Owner conversation of each slot and when it was last used (a counter, for LRU). */
    const owner = new Map<number, { conversation: string; used: number }>()
    let clock = 0

    /** The slot for a request among the free ones, or undefined when none is free. */
    const pick = (request: SlotRequest): Grant | undefined => {
      const free = Array.from({ length: slots }, (_, i) => i).filter((i) => !busy.has(i) && !(request.unownedOnly === true && owner.has(i)))
      if (free.length === 0) return undefined
      const own = request.conversation === undefined
        ? undefined
        : free.find((i) => owner.get(i)?.conversation === request.conversation)
      const slot = own ?? free.find((i) => !owner.has(i)) ??
        free.reduce((a, b) => (owner.get(a)!.used <= owner.get(b)!.used ? a : b))
      const previous = owner.get(slot)?.conversation
      const evicted = previous !== undefined && previous !== request.conversation ? previous : undefined
      return { slot, evicted }
    }

    /** Takes the picked slot for the request, if one is free. */
    const take = (request: SlotRequest): Grant | undefined => {
      const grant = pick(request)
      if (grant === undefined) return undefined
      busy.add(grant.slot)
      if (request.conversation !== undefined) {
        // A conversation owns one slot: moving to another drops the old ownership.
        for (const [i, o] of owner) if (o.conversation === request.conversation && i !== grant.slot) owner.delete(i)
        owner.set(grant.slot, { conversation: request.conversation, used: ++clock })
      } else if (grant.evicted !== undefined) {
        owner.delete(grant.slot)
      }
      return grant
    }

    const give = (grant: Grant) => {
      if (!busy.delete(grant.slot)) return
      const o = owner.get(grant.slot)
      if (o !== undefined) o.used = ++clock
    }

    const queue = LaneQueue.make<SlotRequest, Grant>({ take, give })

    return {
      acquire: (request) => queue.acquire(request.lane, request),
      tryAcquire: (request) =>
        Effect.uninterruptible(Effect.suspend(() => {
          // Never ahead of a waiter: one waits only while no slot is free for it.
          const grant = queue.size > 0 ? undefined : take(request)
          return grant === undefined ? Effect.succeed(undefined) : Effect.as(Effect.addFinalizer(() => queue.release(grant)), grant)
        })),
      status: Effect.sync(() => ({ busy: busy.size, waiting: queue.size, slots, owned: owner.size })),
      slotOf: (conversation) => {
        for (const [i, o] of owner) if (o.conversation === conversation) return i
        return undefined
      }
    }
  })
