/**
 * Store directories held open while they are used, so that nothing the store does can land
 * outside its root. Each component below the root is opened O_RDONLY|O_DIRECTORY|O_NOFOLLOW
 * relative to its already opened parent, through `/proc/self/fd/<parent>/<name>` on Linux (the
 * kernel resolves that magic link to the opened directory itself, not to whatever its old path
 * names now), and checked with fstat: a directory of this user on the root's file system. Every
 * create, link, rename, unlink and open is then done relative to the last descriptor. A directory
 * swapped for a symlink before it is opened is refused (`UnsafePath`); one swapped after it was
 * opened no longer matters: the operation lands in the directory that was opened and checked.
 *
 * Without /proc/self/fd (macOS) the same checks run but operations go by path, as safe as the
 * checks were a moment earlier.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import type { BigIntStats } from "node:fs"
import * as NodeFs from "node:fs"
import * as Path from "node:path"
import { UnsafePath } from "../StoreError.js"
import * as Fs from "./Fs.js"

/** Directory names below the root (no separators, no dot names). */
export type Segments = ReadonlyArray<string>

/** An open, checked directory of the store; its descriptor closes with the scope. */
export interface Dir {
  readonly fd: number
  /** Where it is under the root: for messages, and for callers that need a path. */
  readonly path: string
  readonly stat: BigIntStats
}

/** A regular file opened in a `Dir` (O_NOFOLLOW) and checked with fstat. */
export interface File {
  readonly fd: number
  readonly path: string
  readonly stat: BigIntStats
  readonly dir: Dir
  readonly name: string
}

const hasProcFd = process.platform === "linux" && NodeFs.existsSync("/proc/self/fd")
const uid = process.getuid?.()

const directoryFlags = Fs.O_RDONLY | Fs.O_DIRECTORY | Fs.O_NOFOLLOW | Fs.O_NONBLOCK

/** A name inside one directory; anything else is a bug of the store, not a refusal. */
export const checkName = (name: string) =>
  name.length === 0 || name === "." || name === ".." || name.includes("/") || name.includes("\0")
    ? Effect.die(new Error(`store bug: unsafe path segment ${JSON.stringify(name)}`))
    : Effect.void

const refuse = (path: string, found: string) => Effect.fail(new UnsafePath({ path, found }))

/** `name` inside `dir`, as a path the kernel resolves through the open descriptor. */
export const at = (dir: Dir, name: string): string =>
  hasProcFd ? `/proc/self/fd/${dir.fd}/${name}` : Path.join(dir.path, name)

/** Reports a failed call under `path` in the store rather than the /proc path it went through. */
const relabel = (path: string) => <A>(self: Effect.Effect<A, Fs.FsError>) =>
  Effect.mapError(self, (e) => new Fs.FsError({ op: e.op, path, code: e.code, cause: e.cause }))

const named = (dir: Dir, name: string) => relabel(Path.join(dir.path, name))

/** What is at `target` when it could not be opened as a directory. */
const describe = (target: string, path: string) =>
  Fs.lstat(target).pipe(
    relabel(path),
    Effect.flatMap((st) => refuse(path, st.isDirectory() ? "directory replaced while being opened" : Fs.kindOf(st)))
  )

const openDirectory = (target: string, path: string): Effect.Effect<number, UnsafePath | Fs.FsError, Scope.Scope> =>
  Effect.acquireRelease(
    Fs.open(target, directoryFlags).pipe(
      relabel(path),
      Fs.catchCodes(["ELOOP"], () => refuse(path, "symlink")),
      Fs.catchCodes(["ENOTDIR"], () => describe(target, path))
    ),
    Fs.closeNow
  )

/** Opens the store root itself (the real path `prepareRoot` returned). */
export const openRoot = (root: string): Effect.Effect<Dir, UnsafePath | Fs.FsError, Scope.Scope> =>
  Effect.gen(function*() {
    const fd = yield* openDirectory(root, root)
    const stat = yield* Fs.fstatNow(fd, root)
    if (!stat.isDirectory()) return yield* refuse(root, Fs.kindOf(stat))
    return { fd, path: root, stat }
  })

/**
 * Opens the directory `name` in `parent`; with `create`, makes it first when absent (mode 0700,
 * parent fsynced). An absent directory without `create` fails with `FsError` ENOENT.
 */
export const child = (parent: Dir, name: string, create: boolean): Effect.Effect<Dir, UnsafePath | Fs.FsError, Scope.Scope> =>
  Effect.gen(function*() {
    yield* checkName(name)
    const path = Path.join(parent.path, name)
    const target = at(parent, name)
    if (create) {
      const made = yield* Fs.mkdir(target).pipe(
        named(parent, name),
        Effect.as(true),
        Fs.catchCodes(["EEXIST"], () => Effect.succeed(false))
      )
      if (made) yield* Fs.fsync(parent.fd, parent.path)
    }
    const fd = yield* openDirectory(target, path)
    const stat = yield* Fs.fstatNow(fd, path)
    if (!stat.isDirectory()) return yield* refuse(path, Fs.kindOf(stat))
    if (stat.dev !== parent.stat.dev) return yield* refuse(path, "a mount point (another file system)")
    if (uid !== undefined && stat.uid !== BigInt(uid)) return yield* refuse(path, `a directory owned by uid ${stat.uid}`)
    return { fd, path, stat }
  })

/** Opens `segments` below `parent`, one checked directory at a time. */
export const descend = (parent: Dir, segments: Segments, create: boolean): Effect.Effect<Dir, UnsafePath | Fs.FsError, Scope.Scope> =>
  Effect.reduce(segments, parent, (dir, name) => child(dir, name, create))

/** Opens `segments` below the store root. */
export const open = (root: string, segments: Segments, create: boolean): Effect.Effect<Dir, UnsafePath | Fs.FsError, Scope.Scope> =>
  Effect.flatMap(openRoot(root), (dir) => descend(dir, segments, create))

/** Opens `segments` below the store root if they all exist; `None` when one is absent. */
export const openExisting = (root: string, segments: Segments): Effect.Effect<Option.Option<Dir>, UnsafePath | Fs.FsError, Scope.Scope> =>
  open(root, segments, false).pipe(
    Effect.map(Option.some),
    Fs.catchCodes(["ENOENT"], () => Effect.succeed(Option.none<Dir>()))
  )

/** lstat of `name` in `dir`; `None` when absent. */
export const find = (dir: Dir, name: string): Effect.Effect<Option.Option<BigIntStats>, Fs.FsError> =>
  Effect.zipRight(
    checkName(name),
    Fs.lstat(at(dir, name)).pipe(
      named(dir, name),
      Effect.map(Option.some),
      Fs.catchCodes(["ENOENT"], () => Effect.succeed(Option.none<BigIntStats>()))
    )
  )

/**
 * Opens the regular file `name` in `dir` (O_NOFOLLOW added; a symlink is refused), scoped. Anything
 * but a regular file is refused after the open, which O_NONBLOCK keeps from hanging on a FIFO.
 */
export const openFile = (dir: Dir, name: string, flags: number, mode = 0o600): Effect.Effect<File, UnsafePath | Fs.FsError, Scope.Scope> =>
  Effect.gen(function*() {
    yield* checkName(name)
    const path = Path.join(dir.path, name)
    const fd = yield* Effect.acquireRelease(
      Fs.open(at(dir, name), flags | Fs.O_NOFOLLOW, mode).pipe(
        named(dir, name),
        Fs.catchCodes(["ELOOP"], () => refuse(path, "symlink"))
      ),
      Fs.closeQuietly
    )
    const stat = yield* Fs.fstat(fd, path)
    if (!stat.isFile()) return yield* refuse(path, Fs.kindOf(stat))
    return { fd, path, stat, dir, name }
  })

export const unlink = (dir: Dir, name: string) =>
  Effect.zipRight(checkName(name), named(dir, name)(Fs.unlink(at(dir, name))))

export const rmdir = (dir: Dir, name: string) =>
  Effect.zipRight(checkName(name), named(dir, name)(Fs.rmdir(at(dir, name))))

/** Hard-links `fromName` in `from` as `toName` in `to` (EEXIST when taken). */
export const link = (from: Dir, fromName: string, to: Dir, toName: string) =>
  Effect.zipRight(Effect.zipRight(checkName(fromName), checkName(toName)), named(to, toName)(Fs.link(at(from, fromName), at(to, toName))))

/** Renames `fromName` in `from` to `toName` in `to`, replacing a file there. */
export const rename = (from: Dir, fromName: string, to: Dir, toName: string) =>
  Effect.zipRight(Effect.zipRight(checkName(fromName), checkName(toName)), named(to, toName)(Fs.rename(at(from, fromName), at(to, toName))))

/** The names in `dir`. */
export const readdir = (dir: Dir) => relabel(dir.path)(Fs.readdir(hasProcFd ? `/proc/self/fd/${dir.fd}` : dir.path))

/** fsync of the directory, making a create, link, rename or unlink in it durable. */
export const fsync = (dir: Dir) => Fs.fsync(dir.fd, dir.path)
