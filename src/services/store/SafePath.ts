/**
 * Path safety under the store root. Node has no openat/RESOLVE_BENEATH and O_NOFOLLOW guards
 * only the last component, so every component below the root is checked with lstat (a symlink
 * anywhere inside the store is refused), files are opened O_NOFOLLOW|O_NONBLOCK (a FIFO cannot
 * hang the open), and the opened descriptor is verified: a regular file with the identity lstat
 * saw and, on Linux, /proc/self/fd/N naming the expected path.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import type { BigIntStats } from "node:fs"
import * as Path from "node:path"
import { UnsafePath } from "../StoreError.js"
import * as Fs from "./Fs.js"

/** A directory under the root, given as checked path segments (no separators, no dot names). */
export type Segments = ReadonlyArray<string>

const hasProcFd = process.platform === "linux"

const checkSegment = (segment: string) =>
  segment.length === 0 || segment === "." || segment === ".." || segment.includes("/") || segment.includes("\0")
    ? Effect.die(new Error(`store bug: unsafe path segment ${JSON.stringify(segment)}`))
    : Effect.void

const refuse = (path: string, found: string) => Effect.fail(new UnsafePath({ path, found }))

/**
 * Walks `segments` below `root`, refusing any component that is a symlink or not a directory.
 * With `create`, missing directories are made (mode 0700) and their parent fsynced. Returns the
 * absolute directory path. A missing component without `create` fails with `FsError` ENOENT.
 */
export const ensureDir = (root: string, segments: Segments, create: boolean) =>
  Effect.gen(function*() {
    let current = root
    for (const segment of segments) {
      yield* checkSegment(segment)
      const next = Path.join(current, segment)
      const found = yield* Fs.lstat(next).pipe(
        Effect.map(Option.some),
        Fs.catchCodes(["ENOENT"], (e) => create ? Effect.succeed(Option.none<BigIntStats>()) : Effect.fail(e))
      )
      let st: BigIntStats
      if (Option.isSome(found)) {
        st = found.value
      } else {
        const made = yield* Fs.mkdir(next).pipe(
          Effect.as(true),
          Fs.catchCodes(["EEXIST"], () => Effect.succeed(false))
        )
        if (made) yield* Fs.fsyncDir(current)
        st = yield* Fs.lstat(next)
      }
      if (st.isSymbolicLink()) return yield* refuse(next, "symlink")
      if (!st.isDirectory()) return yield* refuse(next, Fs.kindOf(st))
      current = next
    }
    return current
  })

/** lstat of `name` in a checked directory; `None` when it (or a directory above it) is absent. */
export const lstatIn = (root: string, segments: Segments, name: string) =>
  Effect.gen(function*() {
    yield* checkSegment(name)
    const dir = yield* ensureDir(root, segments, false)
    const path = Path.join(dir, name)
    const st = yield* Fs.lstat(path)
    return Option.some({ path, stat: st })
  }).pipe(Fs.catchCodes(["ENOENT"], () => Effect.succeed(Option.none<{ path: string; stat: BigIntStats }>())))

/** Checks an opened descriptor against the path it was opened by. */
export const verifyDescriptor = (fd: number, path: string, expected: BigIntStats | undefined) =>
  Effect.gen(function*() {
    const st = yield* Fs.fstat(fd, path)
    if (!st.isFile()) return yield* refuse(path, Fs.kindOf(st))
    if (expected !== undefined && (st.dev !== expected.dev || st.ino !== expected.ino)) {
      return yield* refuse(path, "identity changed between lstat and open")
    }
    if (hasProcFd) {
      const actual = yield* Fs.readlink(`/proc/self/fd/${fd}`)
      if (actual !== path) return yield* refuse(path, `descriptor resolves to ${actual}`)
    }
    return st
  })

/** An open, verified regular file; closed when the scope closes. */
export interface OpenFile {
  readonly fd: number
  readonly path: string
  readonly stat: BigIntStats
}

/**
 * Opens an existing regular file under the root for reading, scoped. A symlink, FIFO, device or
 * socket at any component fails with `UnsafePath`; an absent file fails with `FsError` ENOENT.
 */
export const openRead = (root: string, segments: Segments, name: string): Effect.Effect<OpenFile, UnsafePath | Fs.FsError, Scope.Scope> =>
  Effect.gen(function*() {
    yield* checkSegment(name)
    const dir = yield* ensureDir(root, segments, false)
    const path = Path.join(dir, name)
    const before = yield* Fs.lstat(path)
    if (!before.isFile()) return yield* refuse(path, Fs.kindOf(before))
    const fd = yield* Effect.acquireRelease(
      Fs.open(path, Fs.O_RDONLY | Fs.O_NOFOLLOW | Fs.O_NONBLOCK).pipe(
        Fs.catchCodes(["ELOOP"], () => refuse(path, "symlink"))
      ),
      Fs.closeQuietly
    )
    const stat = yield* verifyDescriptor(fd, path, before)
    return { fd, path, stat }
  })

/**
 * Creates a new file (O_EXCL, mode 0600) under the root for writing, scoped; the directories are
 * created as needed. The caller removes it on failure.
 */
export const createExclusive = (root: string, segments: Segments, name: string): Effect.Effect<OpenFile, UnsafePath | Fs.FsError, Scope.Scope> =>
  Effect.gen(function*() {
    yield* checkSegment(name)
    const dir = yield* ensureDir(root, segments, true)
    const path = Path.join(dir, name)
    const fd = yield* Effect.acquireRelease(
      Fs.open(path, Fs.O_WRONLY | Fs.O_CREAT | Fs.O_EXCL | Fs.O_NOFOLLOW, 0o600).pipe(
        Fs.catchCodes(["ELOOP"], () => refuse(path, "symlink"))
      ),
      Fs.closeQuietly
    )
    const stat = yield* verifyDescriptor(fd, path, undefined)
    return { fd, path, stat }
  })

/**
 * Opens a source file outside the store for reading: it must be a regular file (a FIFO or device
 * is refused without blocking). Symlinks in the source path are the caller's business.
 */
export const openSource = (path: string): Effect.Effect<OpenFile, UnsafePath | Fs.FsError, Scope.Scope> =>
  Effect.gen(function*() {
    const fd = yield* Effect.acquireRelease(Fs.open(path, Fs.O_RDONLY | Fs.O_NONBLOCK), Fs.closeQuietly)
    const stat = yield* Fs.fstat(fd, path)
    if (!stat.isFile()) return yield* refuse(path, Fs.kindOf(stat))
    return { fd, path, stat }
  })

/** Makes the store root (mode 0700) if absent and returns its real path; it must be a directory. */
export const prepareRoot = (root: string) =>
  Effect.gen(function*() {
    const absolute = Path.resolve(root)
    yield* Fs.mkdirRecursive(absolute)
    const real = yield* Fs.realpath(absolute)
    const st = yield* Fs.lstat(real)
    if (!st.isDirectory()) return yield* refuse(real, Fs.kindOf(st))
    return real
  })
