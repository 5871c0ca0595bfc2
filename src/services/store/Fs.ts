/**
 * The few node:fs calls the store needs, as Effects. The store uses node:fs directly rather
 * than @effect/platform's FileSystem because it needs O_NOFOLLOW/O_EXCL/O_NONBLOCK opens,
 * descriptor identity (fstat), hard links and directory fsync. Failures are `FsError` with the
 * errno code; callers map the codes they expect and turn the rest into `StoreIoError`.
 *
 * Every call is uninterruptible while the system call is in flight: a started syscall cannot be
 * cancelled, so an interrupted fiber waits for it to land before its finalizers run (a lock
 * holder interrupted mid-write releases the lock only after the write has landed). Nothing here
 * can block indefinitely: sources and store files are opened O_NONBLOCK and must be regular files.
 */
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Fs from "node:fs"
import { StoreIoError } from "../StoreError.js"

/** A failed system call: operation, path and errno code (`ENOENT`, `EEXIST`, ...). */
export class FsError extends Data.TaggedError("FsError")<{
  readonly op: string
  readonly path: string
  readonly code: string
  readonly cause: unknown
}> {}

const codeOf = (e: unknown): string =>
  typeof e === "object" && e !== null && "code" in e && typeof e.code === "string" ? e.code : "UNKNOWN"

const call = <A>(op: string, path: string, f: (cb: (err: NodeJS.ErrnoException | null, a: A) => void) => void) =>
  Effect.uninterruptible(Effect.async<A, FsError>((resume) => {
    f((err, a) => resume(err ? Effect.fail(new FsError({ op, path, code: codeOf(err), cause: err })) : Effect.succeed(a)))
  }))

const callVoid = (op: string, path: string, f: (cb: (err: NodeJS.ErrnoException | null) => void) => void) =>
  call<void>(op, path, (cb) => f((err) => cb(err, undefined)))

/** Turns any remaining `FsError` into a `StoreIoError`. */
export const toStoreError = (e: FsError) => new StoreIoError({ operation: e.op, path: e.path, cause: e.cause })

export const { O_RDONLY, O_WRONLY, O_RDWR, O_CREAT, O_EXCL, O_APPEND, O_NOFOLLOW, O_NONBLOCK, O_DIRECTORY } =
  Fs.constants

export const open = (path: string, flags: number, mode = 0o600) =>
  call<number>("open", path, (cb) => Fs.open(path, flags, mode, cb))

export const close = (fd: number) => callVoid("close", `fd ${fd}`, (cb) => Fs.close(fd, cb))

/** Closes and ignores failure: for release paths where the descriptor is being abandoned. */
export const closeQuietly = (fd: number) => Effect.ignore(close(fd))

/**
 * fstat and close without a trip through the thread pool, for directory descriptors: neither
 * waits on the disk, and the store opens a few directories per operation.
 */
export const fstatNow = (fd: number, path: string) =>
  Effect.try({
    try: () => Fs.fstatSync(fd, { bigint: true }),
    catch: (cause) => new FsError({ op: "fstat", path, code: codeOf(cause), cause })
  })

/** Closes and ignores failure (the descriptor is being abandoned). */
export const closeNow = (fd: number) =>
  Effect.sync(() => {
    try {
      Fs.closeSync(fd)
    } catch {
      // already closed or never valid: nothing left to release
    }
  })

export const fstat = (fd: number, path: string) =>
  call<Fs.BigIntStats>("fstat", path, (cb) => Fs.fstat(fd, { bigint: true }, cb))

export const lstat = (path: string) => call<Fs.BigIntStats>("lstat", path, (cb) => Fs.lstat(path, { bigint: true }, cb))

export const read = (fd: number, path: string, buffer: Uint8Array, offset: number, length: number, position: number | null) =>
  call<number>("read", path, (cb) => Fs.read(fd, buffer, offset, length, position, cb))

/** Writes all of `data`, looping over short writes. */
export const writeAll = (fd: number, path: string, data: Uint8Array, position: number | null = null): Effect.Effect<void, FsError> =>
  Effect.suspend(() => {
    let done = 0
    const step: Effect.Effect<void, FsError> = Effect.suspend(() =>
      done >= data.length
        ? Effect.void
        : call<number>("write", path, (cb) =>
          Fs.write(fd, data, done, data.length - done, position === null ? null : position + done, cb)
        ).pipe(Effect.flatMap((n) => {
          done += n
          return step
        }))
    )
    return step
  })

/** fsync; a failure is reported once and never retried (the page cache state is unknown after it). */
export const fsync = (fd: number, path: string) => callVoid("fsync", path, (cb) => Fs.fsync(fd, cb))

export const ftruncate = (fd: number, path: string, length: number) =>
  callVoid("ftruncate", path, (cb) => Fs.ftruncate(fd, length, cb))

export const fchmod = (fd: number, path: string, mode: number) =>
  callVoid("fchmod", path, (cb) => Fs.fchmod(fd, mode, cb))

export const link = (from: string, to: string) => callVoid("link", to, (cb) => Fs.link(from, to, cb))

export const rename = (from: string, to: string) => callVoid("rename", to, (cb) => Fs.rename(from, to, cb))

export const unlink = (path: string) => callVoid("unlink", path, (cb) => Fs.unlink(path, cb))

export const rmdir = (path: string) => callVoid("rmdir", path, (cb) => Fs.rmdir(path, cb))

export const mkdir = (path: string, mode = 0o700) => callVoid("mkdir", path, (cb) => Fs.mkdir(path, { mode }, cb))

export const mkdirRecursive = (path: string, mode = 0o700) =>
  callVoid("mkdir", path, (cb) => Fs.mkdir(path, { mode, recursive: true }, (err) => cb(err)))

export const readdir = (path: string) => call<Array<string>>("readdir", path, (cb) => Fs.readdir(path, cb))

export const readlink = (path: string) => call<string>("readlink", path, (cb) => Fs.readlink(path, cb))

export const realpath = (path: string) => call<string>("realpath", path, (cb) => Fs.realpath(path, cb))

/** Opens a directory and fsyncs it, so that a rename or link inside it is durable. */
export const fsyncDir = (path: string) =>
  Effect.acquireUseRelease(
    open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW),
    (fd) => fsync(fd, path),
    closeQuietly
  )

/** Turns the `FsError`s left in an effect's error channel into `StoreIoError`s. */
export const orStoreError = <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, Exclude<E, FsError> | StoreIoError, R> =>
  Effect.catchAll(self, (e) => Effect.fail(e instanceof FsError ? toStoreError(e) : e as Exclude<E, FsError>))

/** Recovers from the given errno codes with `onCode`; every other error passes through. */
export const catchCodes = <A2, E2, R2>(codes: ReadonlyArray<string>, onCode: (e: FsError) => Effect.Effect<A2, E2, R2>) =>
<A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A | A2, E | E2, R | R2> =>
  Effect.catchAll(self, (e): Effect.Effect<A2, E | E2, R2> =>
    e instanceof FsError && codes.includes(e.code) ? onCode(e) : Effect.fail(e))

/** What kind of file a stat describes, in words used by `UnsafePath`. */
export const kindOf = (st: Fs.BigIntStats): string =>
  st.isFile()
    ? "regular file"
    : st.isDirectory()
    ? "directory"
    : st.isSymbolicLink()
    ? "symlink"
    : st.isFIFO()
    ? "fifo"
    : st.isCharacterDevice()
    ? "character device"
    : st.isBlockDevice()
    ? "block device"
    : st.isSocket()
    ? "socket"
    : "unknown file type"
