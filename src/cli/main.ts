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
import * as PackageFiles from "../internal/PackageFiles.js"
import * as CliError from "./CliError.js"
import * as Chat from "./Chat.js"
import * as Decide from "./Decide.js"
import * as Engine from "./Engine.js"
import * as Keys from "./Keys.js"
import * as Ps from "./Ps.js"
import * as Serve from "./Serve.js"
import * as Show from "./Show.js"
import * as Status from "./Status.js"
import * as StoreCommands from "./StoreCommands.js"
import * as Terminal from "./Terminal.js"

export const nativegen = Command.make("nativegen").pipe(
  Command.withDescription("On-device LLM inference runtime: server, chat, decisions and the model store"),
  Command.withSubcommands([
    Serve.command,
    Chat.command,
    Decide.command,
    Status.command,
    Show.command,
    Ps.command,
    StoreCommands.command,
    StoreCommands.listCommand("list"),
    StoreCommands.listCommand("ls"),
    StoreCommands.rmCommand("rm"),
    Keys.command,
    Engine.command
  ])
)

/** `--version` prints the installed package's version, read from its package.json at run time. */
export const cli = Command.run(nativegen, { name: "nativegen", version: PackageFiles.packageVersion() })

/** Runs the command line on `argv` (as `process.argv`); fails with the command's failure. */
export const main = (argv: ReadonlyArray<string>) =>
  cli(argv).pipe(
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

NodeRuntime.runMain(main(process.argv), {
  disableErrorReporting: true,
  teardown: (exit, onExit) =>
    onExit(
      Exit.isFailure(exit) && !Cause.isInterruptedOnly(exit.cause)
        ? Option.match(Cause.failureOption(exit.cause), { onNone: () => 1, onSome: CliError.exitCodeOf })
        : 0
    )
})
