/**
 * Where the command line keeps things, by XDG conventions: the store under `$XDG_DATA_HOME`
 * (the store's own default, `StoreConfig.defaults`), the server's socket under `$XDG_RUNTIME_DIR`
 * or, without one, in a private per-user directory under the system temporary directory. Each is
 * overridable by a flag and an environment variable (`--socket` / `NATIVEGEN_SOCKET`,
 * `--store-root` / `NATIVEGEN_STORE_ROOT`). The server creates and checks the socket's directory
 * (private, 0700: src/rpc/SocketDirectory.ts).
 */
import * as Server from "../rpc/Server.js"
import { StoreConfig } from "../services/Store.js"

/** The environment variables the command line reads. */
export const env = {
  socket: "NATIVEGEN_SOCKET",
  storeRoot: "NATIVEGEN_STORE_ROOT"
} as const

/** The default socket path (the server's own default): `$XDG_RUNTIME_DIR/nativegen/nativegen.sock`, else `<tmpdir>/nativegen-<uid>/nativegen.sock`. */
export const defaultSocketPath = (): string => Server.defaultSocketPath()

/** The default store root (the store's own default: `$XDG_DATA_HOME/nativegen/store`). */
export const defaultStoreRoot = (): string => StoreConfig.defaults().root
