/**
 * The store's exclusive cross-process lock: an open-file-description lock (Linux F_OFD_SETLK,
 * flock on macOS) from `fs-native-extensions` on `<root>/store.lock`. The kernel drops it when the
 * holder dies, so a crashed process never leaves the store locked. Fibers of one process are
 * serialized by a semaphore and share one descriptor; `tryLock` and `unlock` are synchronous.
 * When another process holds the lock, `waitForLock` blocks a dedicated thread (not the libuv
 * pool) and wakes as soon as the holder releases. An interrupted wait is abandoned: its
 * descriptor is retired (closed when the wait is granted, which releases the lock) and the next
 * acquisition opens a fresh one (OFD locks belong to the open file description, so two
 * descriptors exclude each other even within one process). A holder interrupted while one of its
 * `Fs` calls is in flight releases the lock only after that call has landed (Fs calls are
 * uninterruptible while in flight): the next holder never sees a write still under way.
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type * as Scope from "effect/Scope"
import * as NodeFs from "node:fs"
import * as Path from "node:path"
import { native } from "../../internal/NativeLock.js"
import { UnsafePath } from "../StoreError.js"
import * as Fs from "./Fs.js"
import * as SafePath from "./SafePath.js"

/** An exclusive lock; `withLock` runs an effect while holding it. */
export interface FileLock {
  readonly path: string
  readonly withLock: <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.Effect<A, E | Fs.FsError | UnsafePath, R>
}

/** Opens the lock file under `root` (creating it) for the scope's lifetime. */
export const make = (root: string, name = "store.lock"): Effect.Effect<FileLock, Fs.FsError | UnsafePath, Scope.Scope> =>
  Effect.gen(function*() {
    const path = Path.join(root, name)
    const openChecked = Fs.open(path, Fs.O_RDWR | Fs.O_CREAT | Fs.O_NOFOLLOW | Fs.O_NONBLOCK, 0o600).pipe(
      Fs.catchCodes(["ELOOP"], () => Effect.fail(new UnsafePath({ path, found: "symlink" }))),
      Effect.flatMap((fd) =>
        SafePath.verifyDescriptor(fd, path, undefined).pipe(Effect.onError(() => Fs.closeQuietly(fd)), Effect.as(fd))
      )
    )
    let current: number | undefined = yield* openChecked
    yield* Effect.addFinalizer(() => current === undefined ? Effect.void : Fs.closeQuietly(current))
    const semaphore = yield* Effect.makeSemaphore(1)

    const lockOn = (fd: number, waiting: { abandoned: boolean }) =>
      Effect.suspend((): Effect.Effect<void, Fs.FsError> => {
        let granted: boolean
        try {
          granted = native.tryLock(fd)
        } catch (cause) {
          return Effect.fail(new Fs.FsError({ op: "lock", path, code: "UNKNOWN", cause }))
        }
        if (granted) return Effect.void
        return Effect.async<void, Fs.FsError>((resume) => {
          native.waitForLock(fd).then(
            () => waiting.abandoned ? NodeFs.close(fd, () => {}) : resume(Effect.void),
            (cause: unknown) =>
              waiting.abandoned
                ? NodeFs.close(fd, () => {})
                : resume(Effect.fail(new Fs.FsError({ op: "lock", path, code: "UNKNOWN", cause })))
          )
          return Effect.sync(() => {
            waiting.abandoned = true
          })
        })
      })

    // `restore` (not `Effect.interruptible`): inside a finalizer the wait stays uninterruptible.
    const withLock = <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E | Fs.FsError | UnsafePath, R> =>
      semaphore.withPermits(1)(Effect.uninterruptibleMask((restore) =>
        Effect.gen(function*() {
          const fd = current ?? (yield* openChecked)
          current = fd
          const waiting = { abandoned: false }
          yield* restore(lockOn(fd, waiting)).pipe(
            Effect.onExit((exit) =>
              Effect.sync(() => {
                if (Exit.isFailure(exit) && waiting.abandoned) current = undefined
              })
            )
          )
          return yield* restore(self).pipe(Effect.ensuring(Effect.sync(() => native.unlock(fd))))
        })
      ))

    return { path, withLock }
  })
