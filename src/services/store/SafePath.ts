/**
 * Path safety under the store root, by path for callers that hold no directory: each function
 * opens the directories it needs through `Dir` (each component O_DIRECTORY|O_NOFOLLOW relative to
 * its checked parent, fstat-checked), works relative to the last one and closes them again. A
 * symlink, FIFO, device or socket anywhere below the root is refused with `UnsafePath`; files are
 * opened O_NOFOLLOW|O_NONBLOCK (a FIFO cannot hang the open) and checked with fstat. Code that goes
 * on to link, rename or remove should hold a `Dir` instead of a returned path: a path is resolved
 * again by the kernel at every use.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import type { BigIntStats } from "node:fs"
import * as Path from "node:path"
import { UnsafePath } from "../StoreError.js"
import * as Dir from "./Dir.js"
import * as Fs from "./Fs.js"

/** A directory under the root, given as checked path segments (no separators, no dot names). */
export type Segments = Dir.Segments

const hasProcFd = process.platform === "linux"

const refuse = (path: string, found: string) => Effect.fail(new UnsafePath({ path, found }))

/**
 * Walks `segments` below `root`, refusing any component that is a symlink or not a directory.
 * With `create`, missing directories are made (mode 0700) and their parent fsynced. Returns the
 * absolute directory path. A missing component without `create` fails with `FsError` ENOENT.
 */
export const ensureDir = (root: string, segments: Segments, create: boolean) =>
  Effect.scoped(Effect.map(Dir.open(root, segments, create), (dir) => dir.path))

/** lstat of `name` in a checked directory; `None` when it (or a directory above it) is absent. */
export const lstatIn = (root: string, segments: Segments, name: string) =>
  Effect.scoped(Effect.gen(function*() {
    const dir = yield* Dir.open(root, segments, false)
    return Option.map(yield* Dir.find(dir, name), (stat) => ({ path: Path.join(dir.path, name), stat }))
  })).pipe(Fs.catchCodes(["ENOENT"], () => Effect.succeed(Option.none<{ path: string; stat: BigIntStats }>())))

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
 * socket at any component fails with `UnsafePath` (the file is lstat-checked before the open, so a
 * device is never opened); an absent file fails with `FsError` ENOENT.
 */
export const openRead = (root: string, segments: Segments, name: string): Effect.Effect<Dir.File, UnsafePath | Fs.FsError, Scope.Scope> =>
  Effect.gen(function*() {
    const dir = yield* Dir.open(root, segments, false)
    const path = Path.join(dir.path, name)
    const before = yield* Dir.find(dir, name)
    if (Option.isNone(before)) return yield* Effect.fail(new Fs.FsError({ op: "open", path, code: "ENOENT", cause: undefined }))
    if (!before.value.isFile()) return yield* refuse(path, Fs.kindOf(before.value))
    const file = yield* Dir.openFile(dir, name, Fs.O_RDONLY | Fs.O_NONBLOCK)
    if (file.stat.dev !== before.value.dev || file.stat.ino !== before.value.ino) {
      return yield* refuse(path, "identity changed between lstat and open")
    }
    return file
  })

/**
 * Creates a new file (O_EXCL, mode 0600) under the root for writing, scoped; the directories are
 * created as needed. The caller removes it on failure (through `file.dir`, not by path).
 */
export const createExclusive = (root: string, segments: Segments, name: string): Effect.Effect<Dir.File, UnsafePath | Fs.FsError, Scope.Scope> =>
  Effect.flatMap(Dir.open(root, segments, true), (dir) => Dir.openFile(dir, name, Fs.O_WRONLY | Fs.O_CREAT | Fs.O_EXCL, 0o600))

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
