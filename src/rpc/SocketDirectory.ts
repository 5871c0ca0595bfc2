/**
 * Where the server's socket lives and how it claims it. The socket sits in a directory of its
 * own that this user owns with mode 0700: created so when absent; when it exists, used only if it
 * is a real directory (not a symlink) of this user that nobody else can enter. Since nobody else
 * can traverse the directory, the socket is never reachable by another user, not even between
 * `bind` and `chmod`.
 *
 * Claiming the path: an exclusive lock on `<socket>.lock` (an open-file-description lock the
 * kernel drops when its holder dies) is held for the server's lifetime, so two servers starting at
 * once cannot both decide a socket is stale. Under it, an existing socket is probed by connecting:
 * a listener means another server is running (`AlreadyRunning`); a refused connection means a
 * stale socket of a dead server, which is removed.
 */
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import * as NodeFs from "node:fs"
import * as Net from "node:net"
import * as Path from "node:path"
import { native } from "../internal/NativeLock.js"
import { AlreadyRunning, ListenFailed, SocketPathOccupied, UnsafeSocketDirectory } from "./RpcError.js"

const codeOf = (cause: unknown): string | undefined =>
  typeof cause === "object" && cause !== null && "code" in cause && typeof cause.code === "string" ? cause.code : undefined

const kindOf = (stat: NodeFs.Stats): string =>
  stat.isSymbolicLink()
    ? "symlink"
    : stat.isDirectory()
    ? "directory"
    : stat.isFile()
    ? "regular file"
    : stat.isFIFO()
    ? "fifo"
    : stat.isCharacterDevice()
    ? "character device"
    : stat.isBlockDevice()
    ? "block device"
    : stat.isSocket()
    ? "socket"
    : "special file"

/** Longest Unix socket path the kernel accepts (sun_path minus its NUL), on Linux; macOS allows 103. */
export const maxSocketPathBytes = process.platform === "linux" ? 107 : 103

/** The identity of a checked directory. */
export interface CheckedDirectory {
  readonly path: string
  readonly dev: number
  readonly ino: number
}

/** Checks that `dir` is a directory (not a symlink) owned by this user with no group or other access. */
export const check = (dir: string): Effect.Effect<CheckedDirectory, UnsafeSocketDirectory | ListenFailed> =>
  Effect.suspend((): Effect.Effect<CheckedDirectory, UnsafeSocketDirectory | ListenFailed> => {
    let stat: NodeFs.Stats
    try {
      stat = NodeFs.lstatSync(dir)
    } catch (cause) {
      return Effect.fail(new ListenFailed({ socketPath: dir, operation: "inspect the socket directory", cause }))
    }
    if (!stat.isDirectory()) {
      return Effect.fail(new UnsafeSocketDirectory({ path: dir, reason: `it is a ${kindOf(stat)}, not a directory` }))
    }
    const uid = process.getuid?.()
    if (uid !== undefined && stat.uid !== uid) {
      return Effect.fail(new UnsafeSocketDirectory({ path: dir, reason: `it is owned by uid ${stat.uid}, not by this user (uid ${uid})` }))
    }
    if ((stat.mode & 0o077) !== 0) {
      return Effect.fail(
        new UnsafeSocketDirectory({
          path: dir,
          reason: `its mode ${(stat.mode & 0o777).toString(8).padStart(4, "0")} lets other users in (it must be 0700)`
        })
      )
    }
    return Effect.succeed({ path: dir, dev: stat.dev, ino: stat.ino })
  })

/**
 * The socket's directory, created 0700 (with any missing parents) when absent; an existing one
 * must pass `check` as it is: it is never loosened or tightened.
 */
export const prepare = (socketPath: string): Effect.Effect<CheckedDirectory, UnsafeSocketDirectory | ListenFailed> =>
  Effect.suspend(() => {
    const dir = Path.dirname(socketPath)
    try {
      const created = NodeFs.mkdirSync(dir, { recursive: true, mode: 0o700 })
      // The umask may have taken bits away; a directory this call created gets exactly 0700.
      if (created !== undefined) NodeFs.chmodSync(dir, 0o700)
    } catch (cause) {
      if (codeOf(cause) !== "EEXIST" && codeOf(cause) !== "ENOTDIR") {
        return Effect.fail(new ListenFailed({ socketPath, operation: "create the socket directory for", cause }))
      }
    }
    return check(dir)
  })

/** Holds an exclusive lock on `<socketPath>.lock` for the scope. */
export const lock = (socketPath: string): Effect.Effect<void, AlreadyRunning | ListenFailed, Scope.Scope> => {
  const path = `${socketPath}.lock`
  return Effect.acquireRelease(
    Effect.suspend((): Effect.Effect<number, AlreadyRunning | ListenFailed> => {
      let fd: number
      try {
        fd = NodeFs.openSync(path, NodeFs.constants.O_RDWR | NodeFs.constants.O_CREAT | NodeFs.constants.O_NOFOLLOW, 0o600)
      } catch (cause) {
        return Effect.fail(new ListenFailed({ socketPath: path, operation: "open the lock file", cause }))
      }
      let locked: boolean
      try {
        locked = native.tryLock(fd)
      } catch (cause) {
        NodeFs.closeSync(fd)
        return Effect.fail(new ListenFailed({ socketPath: path, operation: "lock", cause }))
      }
      if (!locked) {
        NodeFs.closeSync(fd)
        return Effect.fail(new AlreadyRunning({ socketPath, reason: `another server holds ${path}` }))
      }
      return Effect.succeed(fd)
    }),
    (fd) => Effect.sync(() => NodeFs.closeSync(fd))
  ).pipe(Effect.asVoid)
}

/** Connects to `socketPath`: true when something accepts, false when the connection is refused. */
export const probe = (socketPath: string): Effect.Effect<boolean, ListenFailed> =>
  Effect.async<boolean, ListenFailed>((resume) => {
    const socket = Net.createConnection({ path: socketPath })
    const done = (result: Effect.Effect<boolean, ListenFailed>) => {
      socket.removeAllListeners()
      socket.on("error", () => {})
      socket.destroy()
      resume(result)
    }
    socket.once("connect", () => done(Effect.succeed(true)))
    socket.once("error", (cause) => {
      const code = codeOf(cause)
      if (code === "ECONNREFUSED" || code === "ENOENT") done(Effect.succeed(false))
      // A listener whose backlog is full still is a listener.
      else if (code === "EAGAIN") done(Effect.succeed(true))
      else done(Effect.fail(new ListenFailed({ socketPath, operation: "probe", cause })))
    })
    return Effect.sync(() => {
      socket.removeAllListeners()
      socket.on("error", () => {})
      socket.destroy()
    })
  })

/**
 * Makes `socketPath` free for a new listener (call under `lock`): absent is fine; a socket nobody
 * listens on is removed; a live one is `AlreadyRunning`; anything else is left alone and refused.
 */
export const claim = (socketPath: string): Effect.Effect<void, AlreadyRunning | SocketPathOccupied | ListenFailed> =>
  Effect.gen(function*() {
    let stat: NodeFs.Stats
    try {
      stat = NodeFs.lstatSync(socketPath)
    } catch (cause) {
      if (codeOf(cause) === "ENOENT") return
      return yield* Effect.fail(new ListenFailed({ socketPath, operation: "inspect", cause }))
    }
    if (!stat.isSocket()) return yield* Effect.fail(new SocketPathOccupied({ socketPath, found: kindOf(stat) }))
    const live = yield* probe(socketPath).pipe(Effect.timeoutTo({ duration: "2 seconds", onSuccess: (l) => l, onTimeout: () => true }))
    if (live) return yield* Effect.fail(new AlreadyRunning({ socketPath, reason: "a server accepts connections on it" }))
    yield* Effect.logInfo("rpc: removing a stale socket").pipe(Effect.annotateLogs({ service: "RpcServer", socketPath }))
    try {
      NodeFs.unlinkSync(socketPath)
    } catch (cause) {
      if (codeOf(cause) !== "ENOENT") return yield* Effect.fail(new ListenFailed({ socketPath, operation: "remove the stale socket", cause }))
    }
  })

/**
 * After `bind`: the directory is still the one checked (same identity, still private), and the
 * socket in it is ours and mode 0600. Guards against the directory being swapped in between.
 */
export const secure = (socketPath: string, checked: CheckedDirectory): Effect.Effect<void, UnsafeSocketDirectory | ListenFailed> =>
  Effect.gen(function*() {
    const now = yield* check(checked.path)
    if (now.dev !== checked.dev || now.ino !== checked.ino) {
      return yield* Effect.fail(new UnsafeSocketDirectory({ path: checked.path, reason: "it was replaced while the server started" }))
    }
    try {
      NodeFs.chmodSync(socketPath, 0o600)
    } catch (cause) {
      return yield* Effect.fail(new ListenFailed({ socketPath, operation: "chmod", cause }))
    }
  })

/**
 * A listener on `socketPath`, owned for the scope: the directory prepared and checked, the lock
 * held, a stale socket claimed, `listen` run, then the directory checked again and the socket
 * made 0600. When the scope closes (after the listener closed: finalizers run in reverse), the
 * socket is removed if Node's close did not, and never a successor's (same inode only).
 */
export const listenOn = <A, E, R>(
  socketPath: string,
  listen: Effect.Effect<A, E, R>
): Effect.Effect<A, E | AlreadyRunning | SocketPathOccupied | UnsafeSocketDirectory | ListenFailed, R | Scope.Scope> =>
  Effect.gen(function*() {
    const directory = yield* prepare(socketPath)
    yield* lock(socketPath)
    yield* claim(socketPath)
    let bound: NodeFs.Stats | undefined
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        if (bound === undefined) return
        try {
          const now = NodeFs.lstatSync(socketPath)
          if (now.isSocket() && now.ino === bound.ino && now.dev === bound.dev) NodeFs.unlinkSync(socketPath)
        } catch {
          // Already gone.
        }
      })
    )
    const listener = yield* listen
    bound = NodeFs.lstatSync(socketPath)
    yield* secure(socketPath, directory)
    return listener
  })
