/**
 * The `nativegen` command line: `serve` runs the runtime and its socket server in the foreground;
 * `chat`, `decide`, `status`, `ps`, `show` and `store` (with `list`/`ls` and `rm` also at the top
 * level) talk to a running server through the RPC client (`show` and the `store` commands but
 * `import` work directly on the store when no server runs); `keys` works locally. Every failure ends with one line on stderr and a non-zero exit code.
 */
import * as CliConfig from "@effect/cli/CliConfig"
import * as Command from "@effect/cli/Command"
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Cause from "effect/Cause"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import { withoutFiberMetrics } from "../internal/FiberMetrics.js"
import * as PackageFiles from "../internal/PackageFiles.js"
import * as CliError from "./CliError.js"
import * as Terminal from "./Terminal.js"

const description = "On-device LLM inference runtime: server, chat, decisions and the model store"

/** Each subcommand's module, imported only when the command line names it (or needs them all, for help); in the help's order. */
const subcommands = {
  serve: () => import("./Serve.js").then((m) => m.command),
  chat: () => import("./Chat.js").then((m) => m.command),
  decide: () => import("./Decide.js").then((m) => m.command),
  status: () => import("./Status.js").then((m) => m.command),
  show: () => import("./Show.js").then((m) => m.command),
  ps: () => import("./Ps.js").then((m) => m.command),
  store: () => import("./StoreCommands.js").then((m) => m.command),
  list: () => import("./StoreCommands.js").then((m) => m.listCommand("list")),
  ls: () => import("./StoreCommands.js").then((m) => m.listCommand("ls")),
  rm: () => import("./StoreCommands.js").then((m) => m.rmCommand("rm")),
  keys: () => import("./Keys.js").then((m) => m.command),
  engine: () => import("./Engine.js").then((m) => m.command),
  cluster: () => import("../cluster/Command.js").then((m) => m.command)
}

export type SubcommandName = keyof typeof subcommands

const subcommandNames = Object.keys(subcommands) as ReadonlyArray<SubcommandName>

const isSubcommandName = (arg: string | undefined): arg is SubcommandName =>
  arg !== undefined && Object.hasOwn(subcommands, arg)

/**
 * The subcommands `argv` (as `process.argv`) needs: the one its first argument names (nothing
 * else can be meant then), none for a lone `--version`, else all of them (the help, completions,
 * a misspelt command's message).
 */
export const subcommandsFor = (argv: ReadonlyArray<string>): ReadonlyArray<SubcommandName> => {
  const args = argv.slice(2)
  if (isSubcommandName(args[0])) return [args[0]]
  if (args.length === 1 && args[0] === "--version") return []
  return subcommandNames
}

/** The `nativegen` command line with the named subcommands (their modules imported now), to run on an argv. */
export const cli = (names: ReadonlyArray<SubcommandName>) =>
  Effect.promise(() => Promise.all(names.map((name) => subcommands[name]()))).pipe(
    Effect.map((loaded) => {
      // `--version` prints the installed package's version, read from its package.json at run time.
      const config = { name: "nativegen", version: PackageFiles.packageVersion() }
      const root = Command.make("nativegen").pipe(Command.withDescription(description))
      const [first, ...rest] = loaded
      return first === undefined
        ? Command.run(root, config)
        : Command.run(root.pipe(Command.withSubcommands([first, ...rest])), config)
    })
  )

/** Runs the command line on `argv` (as `process.argv`); fails with the command's failure. */
export const main = (argv: ReadonlyArray<string>) =>
  cli(subcommandsFor(argv)).pipe(
    Effect.flatMap((run) => run(argv)),
    Effect.tapErrorCause((cause) =>
      Option.match(CliError.reportLine(cause), { onNone: () => Effect.void, onSome: Console.error })
    ),
    Terminal.withPlainConsole,
    Effect.provide(NodeContext.layer),
    Effect.provide(CliConfig.layer({ showBuiltIns: false }))
  )

// A closed pipe (`nativegen chat ... | head`) ends the command quietly instead of crashing it.
process.stdout.on("error", (error: NodeJS.ErrnoException) => {
  if (error.code === "EPIPE") process.exit(0)
  throw error
})

// Without Effect's fiber metrics (each RPC request's fibers turn them off again: see FiberMetrics).
NodeRuntime.runMain(withoutFiberMetrics(main(process.argv)), {
  disableErrorReporting: true,
  teardown: (exit, onExit) =>
    onExit(
      Exit.isFailure(exit) && !Cause.isInterruptedOnly(exit.cause)
        ? Option.match(Cause.failureOption(exit.cause), { onNone: () => 1, onSome: CliError.exitCodeOf })
        : 0
    )
})
