/**
 * The lane-ordered, interruption-safe wait, written once: the slot pool, admission's workspace
 * waiters and the engine's step gate are each a capacity (what is taken and given back) behind
 * this queue. A request is served at once when it fits and nobody of its lane or a higher one
 * waits; otherwise it waits, and waiters are served highest lane first, first come first served
 * within a lane, strictly from the head: nothing behind the head is served before it.
 *
 * The hard race lives here only: a waiter served at the moment it is interrupted gives its grant
 * back; capacity is taken only while uninterruptible, and only the wait itself is interruptible,
 * so an interruption at any point leaves nothing held.
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type * as Scope from "effect/Scope"
import { Lane } from "../domain/Inference.js"

/** The lanes from the highest priority to the lowest: the order of the `Lane` schema itself. */
export const lanes: ReadonlyArray<Lane> = Lane.literals

/**
 * What the queue hands out. Every function runs synchronously inside the queue's own critical
 * section (never between an await and its resumption), so it sees and changes the owner's state
 * atomically.
 */
export interface Capacity<Request, Grant extends NonNullable<unknown>, E> {
  /** Takes what `request` needs and returns its grant, or undefined when it does not fit now. */
  readonly take: (request: Request) => Grant | undefined
  /** Gives a grant's capacity back (the queue then serves whoever fits). */
  readonly give: (grant: Grant) => void
  /** Why `request` can never be served, if so: it fails at once, or when it becomes so while waiting. */
  readonly refuse?: ((request: Request) => E | undefined) | undefined
}

interface Waiter<Request, Grant, E> {
  readonly request: Request
  readonly rank: number
  readonly deferred: Deferred.Deferred<Grant, E>
  /** Set when served, so that a waiter interrupted before it resumed gives the grant back. */
  granted: Grant | undefined
}

type Restore = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>

export class LaneQueue<Request, Grant extends NonNullable<unknown>, E = never> {
  /** One FIFO per lane, highest lane first. */
  private readonly queues: Array<Array<Waiter<Request, Grant, E>>> = lanes.map(() => [])
  private count = 0

  constructor(private readonly capacity: Capacity<Request, Grant, E>) {}

  /** Waiters now. */
  get size(): number {
    return this.count
  }

  /** The waiting requests in the order they will be served. */
  waiting(): Array<Request> {
    return this.queues.flatMap((queue) => queue.map((w) => w.request))
  }

  /** Takes a grant for the scope's lifetime; it is given back when the scope closes. */
  acquire(lane: Lane, request: Request): Effect.Effect<Grant, E, Scope.Scope> {
    return Effect.uninterruptibleMask((restore) =>
      Effect.tap(this.take(lane, request, restore), (grant) => Effect.addFinalizer(() => this.release(grant)))
    )
  }

  /** Runs `use` holding a grant, given back when `use` ends however it ends (no scope needed). */
  withGrant<A, E2, R>(lane: Lane, request: Request, use: (grant: Grant) => Effect.Effect<A, E2, R>): Effect.Effect<A, E | E2, R> {
    return Effect.uninterruptibleMask((restore) =>
      Effect.flatMap(this.take(lane, request, restore), (grant) => Effect.ensuring(restore(use(grant)), this.release(grant)))
    )
  }

  /** Gives a grant back and serves the waiters that fit now. */
  release(grant: Grant): Effect.Effect<void> {
    return Effect.sync(() => this.unsafeRelease(grant))
  }

  unsafeRelease(grant: Grant): void {
    this.capacity.give(grant)
    this.unsafeDispatch()
  }

  /**
   * Fails the waiters that can never be served, then serves from the head while it fits. The
   * queue runs it on every release; an owner runs it after changing its capacity by other means.
   */
  unsafeDispatch(): void {
    if (this.count === 0) return
    const refuse = this.capacity.refuse
    if (refuse !== undefined) {
      for (const queue of this.queues) {
        for (let i = queue.length - 1; i >= 0; i--) {
          const waiter = queue[i]!
          const refused = refuse(waiter.request)
          if (refused === undefined) continue
          queue.splice(i, 1)
          this.count--
          Deferred.unsafeDone(waiter.deferred, Exit.fail(refused))
        }
      }
    }
    for (const queue of this.queues) {
      while (queue.length > 0) {
        const head = queue[0]!
        const grant = this.capacity.take(head.request)
        if (grant === undefined) return
        queue.shift()
        this.count--
        head.granted = grant
        Deferred.unsafeDone(head.deferred, Exit.succeed(grant))
      }
    }
  }

  /** Whether anyone of `lane` or a higher lane waits now. */
  waitsAtOrAbove(lane: Lane): boolean {
    return this.waitingAtOrAbove(lanes.indexOf(lane))
  }

  /** Whether anyone of `lane` or a higher lane waits (so a newcomer of `lane` must queue behind). */
  private waitingAtOrAbove(lane: number): boolean {
    if (this.count === 0) return false
    for (let i = 0; i <= lane; i++) if (this.queues[i]!.length > 0) return true
    return false
  }

  /** Runs masked: capacity is taken uninterruptibly; only the wait runs under `restore`. */
  private take(lane: Lane, request: Request, restore: Restore): Effect.Effect<Grant, E> {
    return Effect.withFiberRuntime((fiber) => {
      const refused = this.capacity.refuse?.(request)
      if (refused !== undefined) return Effect.fail(refused)
      const at = lanes.indexOf(lane)
      if (!this.waitingAtOrAbove(at)) {
        const grant = this.capacity.take(request)
        if (grant !== undefined) return Effect.succeed(grant)
      }
      const waiter: Waiter<Request, Grant, E> = {
        request,
        rank: at,
        deferred: Deferred.unsafeMake<Grant, E>(fiber.id()),
        granted: undefined
      }
      this.queues[at]!.push(waiter)
      this.count++
      return Effect.onInterrupt(restore(Deferred.await(waiter.deferred)), () => this.abandon(waiter))
    })
  }

  /** An interrupted waiter: gives back a grant it was served meanwhile, or leaves the queue. */
  private abandon(waiter: Waiter<Request, Grant, E>): Effect.Effect<void> {
    return Effect.sync(() => {
      if (waiter.granted !== undefined) return this.unsafeRelease(waiter.granted)
      const queue = this.queues[waiter.rank]!
      const at = queue.indexOf(waiter)
      if (at < 0) return
      queue.splice(at, 1)
      this.count--
      // The head may have left: those behind it may fit now.
      this.unsafeDispatch()
    })
  }
}

export const make = <Request, Grant extends NonNullable<unknown>, E = never>(
  capacity: Capacity<Request, Grant, E>
): LaneQueue<Request, Grant, E> => new LaneQueue(capacity)
