/**
 * The native lock shim, loaded once: open-file-description locks (Linux F_OFD_SETLK, flock on
 * macOS) from `fs-native-extensions`. The kernel drops such a lock when its holder dies, and two
 * descriptors of one file exclude each other even within a process. `tryLock` and `unlock` are
 * synchronous; `waitForLock` blocks a dedicated thread (not the libuv pool) until the lock is granted.
 */
import { createRequire } from "node:module"

export interface NativeLock {
  /** Takes the lock on `fd` if it is free: true when taken, false when another description holds it. */
  readonly tryLock: (fd: number) => boolean
  /** Resolves once the lock on `fd` is granted. */
  readonly waitForLock: (fd: number) => Promise<void>
  /** Releases the lock on `fd`. */
  readonly unlock: (fd: number) => void
}

export const native: NativeLock = createRequire(import.meta.url)("fs-native-extensions")
