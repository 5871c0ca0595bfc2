/**
 * Where nativegen keeps what it can regenerate (generated models, other caches):
 * `$XDG_CACHE_HOME/nativegen`, else `~/.cache/nativegen`. Never relative to the source tree or
 * the installed package, which may be read-only.
 */
import * as Os from "node:os"
import * as Path from "node:path"

/** `$XDG_CACHE_HOME/nativegen`; a relative or empty `XDG_CACHE_HOME` is ignored, as the XDG base directory specification says. */
export const cacheRoot = (env: NodeJS.ProcessEnv = process.env): string => {
  const xdg = env["XDG_CACHE_HOME"]
  const base = xdg !== undefined && xdg !== "" && Path.isAbsolute(xdg) ? xdg : Path.join(Os.homedir(), ".cache")
  return Path.join(base, "nativegen")
}
