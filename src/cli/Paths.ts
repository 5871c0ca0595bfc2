/**
 * Where the command line keeps things, by XDG conventions: the store under `$XDG_DATA_HOME`
 * (the store's own default, `StoreConfig.defaults`), the server's socket under `$XDG_RUNTIME_DIR`
 * or, without one, in a private per-user directory under the system temporary directory. Each is
 * overridable by a flag and an environment variable (`--socket` / `NATIVEGEN_SOCKET`,
 * `--store-root` / `NATIVEGEN_STORE_ROOT`). `ensureSocketDir` creates the socket's directory 0700
 * and refuses one that another user owns or that others can write.
 */
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { StoreConfig } from "../services/Store.js"

/** The environment variables the command line reads. */
export const env = {
  socket: "NATIVEGEN_SOCKET",
  storeRoot: "NATIVEGEN_STORE_ROOT"
} as const

/** The socket's file name inside its directory. */
export const socketFileName = "nativegen.sock"

/** The longest Unix socket path Linux accepts (`sun_path` is 108 bytes with the terminating NUL). */
export const maxSocketPathBytes = 107

export interface Environment {
  readonly XDG_RUNTIME_DIR?: string | undefined
  readonly XDG_DATA_HOME?: string | undefined
  readonly HOME?: string | undefined
}

/** Only absolute XDG paths count (the XDG base directory specification says to ignore relative ones). */
const absolute = (value: string | undefined): string | undefined =>
  value !== undefined && value !== "" && Path.isAbsolute(value) ? value : undefined

/** The default socket path: `$XDG_RUNTIME_DIR/nativegen/nativegen.sock`, else `<tmpdir>/nativegen-<uid>/nativegen.sock`. */
export const defaultSocketPath = (
  environment: Environment = process.env,
  uid: number = Os.userInfo().uid,
  tmpdir: string = Os.tmpdir()
): string => {
  const runtimeDir = absolute(environment.XDG_RUNTIME_DIR)
  return runtimeDir !== undefined
    ? Path.join(runtimeDir, "nativegen", socketFileName)
    : Path.join(tmpdir, `nativegen-${uid}`, socketFileName)
}

/** The default store root (the store's own default: `$XDG_DATA_HOME/nativegen/store`). */
export const defaultStoreRoot = (): string => StoreConfig.defaults().root

/** The socket directory cannot be used (another owner, writable by others, not a directory, path too long). */
export class SocketPathError extends Data.TaggedError("SocketPathError")<{
  readonly path: string
  readonly reason: string
}> {
  override get message() {
    return `cannot use socket path ${this.path}: ${this.reason}`
  }
}

/** Checks the path length limit of Unix sockets. */
export const checkSocketPath = (path: string): Effect.Effect<string, SocketPathError> =>
  Buffer.byteLength(path) > maxSocketPathBytes
    ? Effect.fail(
      new SocketPathError({ path, reason: `longer than ${maxSocketPathBytes} bytes, the limit for Unix sockets` })
    )
    : Effect.succeed(path)

/**
 * Creates the socket's directory (0700, parents as needed). With `private` (the default path's
 * directory), also checks it: a directory (not a symbolic link) owned by this user and not
 * writable by group or others; a shared temporary directory is otherwise a place where another
 * user could plant a socket of their own. An explicitly chosen directory is the user's call.
 */
export const ensureSocketDir = (
  socketPath: string,
  options: { readonly private: boolean }
): Effect.Effect<string, SocketPathError> =>
  Effect.gen(function*() {
    yield* checkSocketPath(socketPath)
    const dir = Path.dirname(socketPath)
    const fail = (reason: string) => Effect.fail(new SocketPathError({ path: socketPath, reason }))
    const stat = yield* Effect.try({
      try: () => {
        Fs.mkdirSync(dir, { recursive: true, mode: 0o700 })
        return options.private ? Fs.lstatSync(dir) : Fs.statSync(dir)
      },
      catch: (cause) => new SocketPathError({ path: socketPath, reason: cause instanceof Error ? cause.message : String(cause) })
    })
    if (!stat.isDirectory()) return yield* fail(`${dir} is not a directory`)
    if (!options.private) return dir
    const uid = process.getuid?.()
    if (uid !== undefined && stat.uid !== uid) return yield* fail(`${dir} belongs to another user (uid ${stat.uid})`)
    if ((stat.mode & 0o022) !== 0) {
      return yield* fail(`${dir} is writable by others (mode ${(stat.mode & 0o777).toString(8)})`)
    }
    return dir
  })
