/**
 * The generation context's sequences (slots), handed out in lane order: a waiter of a higher lane
 * is served first, and FIFO within a lane. A conversation keeps its slot between turns (its KV
 * cache is its reuse); when every free slot belongs to some conversation, the least recently
 * used one is taken over. A waiter that is interrupted leaves the queue; a slot is released
 * exactly once, when the scope that acquired it closes.
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import type { Lane } from "../../domain/Inference.js"

export const LANE_ORDER: ReadonlyArray<Lane> = ["decision", "foreground", "utility", "preparation"]

export interface Grant {
  readonly slot: number
  /** The conversation whose slot was taken over, if any. */
  readonly evicted: string | undefined
}

export interface SlotRequest {
  readonly lane: Lane
  readonly conversation?: string | undefined
}

export interface SlotPool {
  readonly acquire: (request: SlotRequest) => Effect.Effect<Grant, never, Scope.Scope>
  readonly status: Effect.Effect<{ readonly busy: number; readonly waiting: number; readonly slots: number; readonly owned: number }>
  /** The slot a conversation owns now, if any. */
  readonly slotOf: (conversation: string) => number | undefined
}

interface Waiter {
  readonly request: SlotRequest
  readonly deferred: Deferred.Deferred<Grant>
}

export const make = (slots: number): Effect.Effect<SlotPool> =>
  Effect.sync(() => {
    const busy = new Set<number>()
    /** Owner conversation of each slot and when it was last used (a counter, for LRU). */
    const owner = new Map<number, { conversation: string; used: number }>()
    const queues: Record<Lane, Array<Waiter>> = { decision: [], foreground: [], utility: [], preparation: [] }
    let clock = 0

    /** The slot for a request among the free ones, or undefined when none is free. */
    const pick = (request: SlotRequest): Grant | undefined => {
      const free = Array.from({ length: slots }, (_, i) => i).filter((i) => !busy.has(i))
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

    const take = (request: SlotRequest, grant: Grant) => {
      busy.add(grant.slot)
      if (request.conversation !== undefined) {
        // A conversation owns one slot: moving to another drops the old ownership.
        for (const [i, o] of owner) if (o.conversation === request.conversation && i !== grant.slot) owner.delete(i)
        owner.set(grant.slot, { conversation: request.conversation, used: ++clock })
      } else if (grant.evicted !== undefined) {
        owner.delete(grant.slot)
      }
    }

    const dispatch = () => {
      for (const lane of LANE_ORDER) {
        const queue = queues[lane]
        while (queue.length > 0) {
          const grant = pick(queue[0]!.request)
          if (grant === undefined) return
          const waiter = queue.shift()!
          take(waiter.request, grant)
          Deferred.unsafeDone(waiter.deferred, Effect.succeed(grant))
        }
      }
    }

    const release = (slot: number) =>
      Effect.sync(() => {
        if (!busy.delete(slot)) return
        const o = owner.get(slot)
        if (o !== undefined) o.used = ++clock
        dispatch()
      })

    const waitingAtOrAbove = (lane: Lane) =>
      LANE_ORDER.slice(0, LANE_ORDER.indexOf(lane) + 1).some((l) => queues[l].length > 0)

    /** Runs masked; only the wait is interruptible (`restore`). */
    const acquireGrant = (
      request: SlotRequest,
      restore: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
    ) =>
      Effect.flatMap(Deferred.make<Grant>(), (deferred) => {
        const now = waitingAtOrAbove(request.lane) ? undefined : pick(request)
        if (now !== undefined) {
          take(request, now)
          return Effect.succeed(now)
        }
        const waiter: Waiter = { request, deferred }
        queues[request.lane].push(waiter)
        return restore(Deferred.await(deferred)).pipe(
          Effect.onInterrupt(() =>
            Effect.suspend(() => {
              const queue = queues[request.lane]
              const i = queue.indexOf(waiter)
              if (i >= 0) {
                queue.splice(i, 1)
                return Effect.void
              }
              // Granted just as it was interrupted: give the slot back.
              return Effect.flatMap(Deferred.await(deferred), (grant) => release(grant.slot))
            })
          )
        )
      })

    return {
      // Not acquireRelease: its acquire is uninterruptible, so a queued waiter could not be interrupted.
      acquire: (request) =>
        Effect.uninterruptibleMask((restore) =>
          Effect.tap(acquireGrant(request, restore), (grant) => Effect.addFinalizer(() => release(grant.slot)))
        ),
      status: Effect.sync(() => ({
        busy: busy.size,
        waiting: LANE_ORDER.reduce((n, l) => n + queues[l].length, 0),
        slots,
        owned: owner.size
      })),
      slotOf: (conversation) => {
        for (const [i, o] of owner) if (o.conversation === conversation) return i
        return undefined
      }
    }
  })
