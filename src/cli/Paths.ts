/**
 * Where the command line keeps things, by XDG conventions: the store under `$XDG_DATA_HOME`
 * (the store's own default, `StoreConfig.defaults`), the server's socket under `$XDG_RUNTIME_DIR`
 * or, without one, in a private per-user directory under the system temporary directory. Each is
 * overridable by a flag and an environment variable (`--socket` / `NATIVEGEN_SOCKET`,
 * `--store-root` / `NATIVEGEN_STORE_ROOT`). The server creates and checks the socket's directory
 * (private, 0700: src/rpc/SocketDirectory.ts).
 */
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
