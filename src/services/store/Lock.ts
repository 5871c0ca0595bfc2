/**
 * The store's exclusive cross-process lock: an open-file-description lock (Linux F_OFD_SETLK,
 * flock on macOS) from `fs-native-extensions` on `<root>/store.lock`. The kernel drops it when the
 * holder dies, so a crashed process never leaves the store locked. Fibers of one process are
 * serialized by a semaphore first; between processes the non-blocking `tryLock` is polled with a
 * capped backoff on the live clock, which keeps the wait interruptible and never parks a libuv
 * thread-pool thread in a blocking fcntl.
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import { createRequire } from "node:module"
import * as Path from "node:path"
import { UnsafePath } from "../StoreError.js"
import * as Fs from "./Fs.js"
import * as SafePath from "./SafePath.js"

interface NativeLocks {
  readonly tryLock: (fd: number, options?: { readonly shared?: boolean }) => boolean
  readonly unlock: (fd: number) => void
}

const native: NativeLocks = createRequire(import.meta.url)("fs-native-extensions")

/** An exclusive lock; `withLock` runs an effect while holding it. */
export interface FileLock {
  readonly path: string
  readonly withLock: <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.Effect<A, E | Fs.FsError, R>
}

class LockBusy {
  readonly _tag = "LockBusy"
}

const liveClock = Clock.make()

const retry = Schedule.exponential("1 millis", 2).pipe(Schedule.union(Schedule.spaced("20 millis")))

/** Opens (creating) the lock file under `root` for the scope's lifetime. */
export const make = (root: string, name = "store.lock"): Effect.Effect<FileLock, Fs.FsError | UnsafePath, Scope.Scope> =>
  Effect.gen(function*() {
    const path = Path.join(root, name)
    const fd = yield* Effect.acquireRelease(
      Fs.open(path, Fs.O_RDWR | Fs.O_CREAT | Fs.O_NOFOLLOW | Fs.O_NONBLOCK, 0o600).pipe(
        Fs.catchCodes(["ELOOP"], () => Effect.fail(new UnsafePath({ path, found: "symlink" })))
      ),
      Fs.closeQuietly
    )
    yield* SafePath.verifyDescriptor(fd, path, undefined)
    const semaphore = yield* Effect.makeSemaphore(1)
    const tryLock = Effect.try({
      try: () => native.tryLock(fd),
      catch: (cause) => new Fs.FsError({ op: "lock", path, code: "UNKNOWN", cause })
    }).pipe(
      Effect.flatMap((granted) => granted ? Effect.void : Effect.fail(new LockBusy()))
    )
    const acquire = tryLock.pipe(
      Effect.retry({ schedule: retry, while: (e) => e instanceof LockBusy }),
      Effect.withClock(liveClock),
      Effect.catchIf((e): e is LockBusy => e instanceof LockBusy, () => Effect.die(new Error("unreachable: lock retry ended")))
    )
    const release = Effect.sync(() => native.unlock(fd))
    const withLock = <A, E, R>(self: Effect.Effect<A, E, R>) =>
      semaphore.withPermits(1)(Effect.acquireUseRelease(acquire, () => self, () => release))
    return { path, withLock }
  })
