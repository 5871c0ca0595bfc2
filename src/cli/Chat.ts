/**
 * `nativegen chat [PROMPT]`: streams an answer from a running server. With a prompt, one turn.
 * Without, a conversation: on a terminal an interactive session (ChatSession: line editing,
 * history, commands, Ctrl-C stops an answer); from a pipe (or with `--json`) one user turn per
 * line of stdin. Either way every turn sends the whole history with the same conversation id and
 * the previous turn's checkpoint, so the server reuses what its sequence already holds
 * ("continuation"). `--json` prints one JSON event per line: the chunks, then the Done event
 * with usage (reuse kind included), timings and the checkpoint.
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Stream from "effect/Stream"
import * as Readline from "node:readline"
import { Provider } from "../services/Provider.js"
import type * as ChatInput from "./ChatInput.js"
import * as ChatSession from "./ChatSession.js"
import { newConversation, turn } from "./ChatTurn.js"
import * as Flags from "./Flags.js"
import * as Remote from "./Remote.js"

export const options = {
  socket: Flags.socket,
  json: Flags.json,
  hideThoughts: Options.boolean("hide-thoughts").pipe(
    Options.withDescription("Leave out the model's thought channel (shown dimmed by default)")
  ),
  system: Options.text("system").pipe(Options.withDescription("A system message before the conversation"), Options.optional),
  maxTokens: Options.integer("max-tokens").pipe(
    Options.withAlias("n"),
    Options.withDescription("Most tokens generated per answer"),
    Options.withDefault(256)
  ),
  temperature: Options.float("temperature").pipe(
    Options.withAlias("t"),
    Options.withDescription("Sampling temperature; 0 is greedy (deterministic)"),
    Options.withDefault(0.7)
  ),
  seed: Options.integer("seed").pipe(Options.withDescription("Sampling seed"), Options.optional),
  conversation: Options.text("conversation").pipe(
    Options.withDescription("Conversation id (default: a new random one)"),
    Options.optional
  )
}

export const args = { prompt: Args.text({ name: "prompt" }).pipe(Args.withDescription("One user turn; without it, an interactive session"), Args.optional) }

export interface ChatSettings {
  readonly socket: string
  readonly json: boolean
  readonly hideThoughts: boolean
  readonly system: Option.Option<string>
  readonly maxTokens: number
  readonly temperature: number
  readonly seed: Option.Option<number>
  readonly conversation: Option.Option<string>
  readonly prompt: Option.Option<string>
}

/** The settings of the command line flags, as a session's settings. */
export const sessionSettings = (settings: ChatSettings): ChatInput.SessionSettings => ({
  temperature: settings.temperature,
  think: undefined,
  system: Option.getOrUndefined(settings.system),
  maxTokens: settings.maxTokens,
  seed: Option.getOrUndefined(settings.seed)
})

/** Lines of stdin, closed with the scope. */
const stdinLines = Stream.unwrapScoped(
  Effect.map(
    Effect.acquireRelease(
      Effect.sync(() => Readline.createInterface({ input: process.stdin, crlfDelay: Infinity, terminal: false })),
      (rl) => Effect.sync(() => rl.close())
    ),
    (rl) => Stream.fromAsyncIterable(rl, (cause) => cause)
  )
)

/** Standard input that is not a terminal (or `--json`): one user turn per line; `/new` starts a new conversation, `/exit` ends. */
const lineByLine = (provider: Provider["Type"], settings: ChatSettings) =>
  Effect.gen(function*() {
    const options = sessionSettings(settings)
    const conversation = yield* Ref.make(newConversation(Option.getOrUndefined(settings.conversation)))
    yield* stdinLines.pipe(
      Stream.map((line) => line.trim()),
      Stream.takeWhile((line) => line !== "/exit"),
      Stream.runForEach((line) =>
        Effect.gen(function*() {
          if (line === "/new") {
            yield* Ref.set(conversation, newConversation())
          } else if (line !== "") {
            yield* Ref.set(conversation, yield* turn(provider, settings, options, yield* Ref.get(conversation), line))
          }
        })
      )
    )
  })

export const chat = (settings: ChatSettings) =>
  Effect.gen(function*() {
    const provider = yield* Provider
    yield* Option.match(settings.prompt, {
      onNone: () =>
        process.stdin.isTTY === true && process.stdout.isTTY === true && !settings.json
          ? ChatSession.run(provider, {
            hideThoughts: settings.hideThoughts,
            settings: sessionSettings(settings),
            conversation: Option.getOrUndefined(settings.conversation),
            socket: settings.socket
          })
          : lineByLine(provider, settings),
      onSome: (prompt) =>
        Effect.asVoid(
          turn(provider, settings, sessionSettings(settings), newConversation(Option.getOrUndefined(settings.conversation)), prompt)
        )
    })
  }).pipe(Remote.withClient(settings.socket))

export const command = Command.make("chat", { ...options, ...args }, chat).pipe(
  Command.withDescription("Chat with the generation model of a running server (one prompt, or interactive)")
)
