/**
 * Options shared by several commands. Each setting is taken from its flag, else from its
 * environment variable, else from its default (XDG locations, see Paths).
 */
import * as Options from "@effect/cli/Options"
import * as Config from "effect/Config"
import type * as Option from "effect/Option"
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

/**
 * An optional flag that falls back to an environment variable: `--NAME`, else the variable `env`
 * read by `config`, else none. The description ends by naming the variable and, given
 * `defaultIs`, what holds when neither is set.
 */
export const fromEnv = <A>(
  flag: Options.Options<A>,
  env: string,
  config: (name: string) => Config.Config<A>,
  description: string,
  defaultIs?: string
): Options.Options<Option.Option<A>> =>
  flag.pipe(
    Options.withDescription(`${description} (env ${env}${defaultIs === undefined ? "" : `; default ${defaultIs}`})`),
    Options.optional,
    Options.withFallbackConfig(Config.option(config(env)))
  )
