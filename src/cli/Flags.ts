/**
 * Options shared by several commands. Each setting is taken from its flag, else from its
 * environment variable, else from its default (XDG locations, see Paths).
 */
import * as Options from "@effect/cli/Options"
import * as Config from "effect/Config"
import * as Paths from "./Paths.js"

/** `--socket PATH` / `NATIVEGEN_SOCKET`: the server's Unix socket. */
export const socket = Options.text("socket").pipe(
  Options.withAlias("s"),
  Options.withDescription(
    `The server's Unix socket (env ${Paths.env.socket}; default ${Paths.defaultSocketPath()})`
  ),
  Options.withDefault(Paths.defaultSocketPath()),
  Options.withFallbackConfig(Config.string(Paths.env.socket))
)

/** `--json`: machine-readable output. */
export const json = Options.boolean("json").pipe(Options.withDescription("Print JSON instead of text"))
