/**
 * Where the command line keeps things, by XDG conventions: the store under `$XDG_DATA_HOME`
 * (the store's own default, `StoreConfig.defaults`), the server's socket under `$XDG_RUNTIME_DIR`
 * or, without one, in a private per-user directory under the system temporary directory. Each is
 * overridable by a flag and an environment variable (`--socket` / `NATIVEGEN_SOCKET`,
 * `--store-root` / `NATIVEGEN_STORE_ROOT`, `--trusted-keys` / `NATIVEGEN_TRUSTED_KEYS_DIR`).
 * The server creates and checks the socket's directory (private, 0700: src/rpc/SocketDirectory.ts).
 * Trusted signing keys live under `$XDG_CONFIG_HOME` (configuration, not data).
 */
import * as Os from "node:os"
import * as Path from "node:path"
import * as Server from "../rpc/Server.js"
import { StoreConfig } from "../services/Store.js"

/** The environment variables the command line reads. */
export const env = {
  socket: "NATIVEGEN_SOCKET",
  storeRoot: "NATIVEGEN_STORE_ROOT",
  trustedKeys: "NATIVEGEN_TRUSTED_KEYS_DIR"
} as const

/** The default socket path (the server's own default): `$XDG_RUNTIME_DIR/nativegen/nativegen.sock`, else `<tmpdir>/nativegen-<uid>/nativegen.sock`. */
export const defaultSocketPath = (): string => Server.defaultSocketPath()

/** The default store root (the store's own default: `$XDG_DATA_HOME/nativegen/store`). */
export const defaultStoreRoot = (): string => StoreConfig.defaults().root

/** Only absolute XDG paths count (the XDG base directory specification says to ignore relative ones). */
const xdg = (name: "XDG_CONFIG_HOME" | "XDG_DATA_HOME", fallback: ReadonlyArray<string>): string => {
  const value = process.env[name]
  return value !== undefined && value !== "" && Path.isAbsolute(value) ? value : Path.join(Os.homedir(), ...fallback)
}

/** The directory of public keys `serve` trusts: `$XDG_CONFIG_HOME/nativegen/trusted-keys` (`~/.config/...`). */
export const defaultTrustedKeysDir = (): string => Path.join(xdg("XDG_CONFIG_HOME", [".config"]), "nativegen", "trusted-keys")

/** Where `keys generate` puts key pairs: `$XDG_DATA_HOME/nativegen/keys` (`~/.local/share/...`). */
export const defaultKeyDir = (): string => Path.join(xdg("XDG_DATA_HOME", [".local", "share"]), "nativegen", "keys")
