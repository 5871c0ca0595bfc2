/**
 * `nativegen chat [PROMPT]`: streams an answer from a running server. With a prompt, one turn;
 * without, an interactive session reading one user turn per line from stdin that keeps the
 * conversation: every turn sends the whole history with the same conversation id and the
 * previous turn's checkpoint, so the server reuses what its sequence already holds
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
import * as Crypto from "node:crypto"
import * as Readline from "node:readline"
import type { ChatMessage, Checkpoint, GenerateChunk, GenerateRequest } from "../domain/Inference.js"
import { Provider } from "../services/Provider.js"
import * as Flags from "./Flags.js"
import * as Format from "./Format.js"
import * as Remote from "./Remote.js"
import * as Terminal from "./Terminal.js"

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

type Done = Extract<GenerateChunk, { readonly _tag: "Done" }>

/** What a conversation holds between turns. */
interface Conversation {
  readonly id: string
  readonly messages: ReadonlyArray<ChatMessage>
  readonly checkpoint: Checkpoint | undefined
}

const newConversation = (settings: ChatSettings, id?: string): Conversation => ({
  id: id ?? Option.getOrElse(settings.conversation, () => `cli-${Crypto.randomUUID()}`),
  messages: Option.match(settings.system, { onNone: () => [], onSome: (content) => [{ role: "system", content }] }),
  checkpoint: undefined
})

/** The request of the next turn: the full history, the conversation id and the last checkpoint. */
export const nextRequest = (
  conversation: Conversation,
  user: string,
  settings: Pick<ChatSettings, "maxTokens" | "temperature" | "seed">
): GenerateRequest => ({
  messages: [...conversation.messages, { role: "user", content: user }],
  conversation: conversation.id,
  ...(conversation.checkpoint === undefined ? {} : { checkpoint: conversation.checkpoint }),
  maxTokens: settings.maxTokens,
  sampling: {
    temperature: settings.temperature,
    ...Option.match(settings.seed, { onNone: () => ({}), onSome: (seed) => ({ seed }) })
  }
})

/** Runs one turn: streams and prints the answer; returns the conversation after it. */
const turn = (provider: Provider["Type"], settings: ChatSettings, conversation: Conversation, user: string) =>
  Effect.gen(function*() {
    const request = nextRequest(conversation, user, settings)
    const style = Terminal.stdoutStyle()
    const thoughts: Format.ThoughtMode = settings.hideThoughts ? "hide" : "show"
    const state = yield* Ref.make({ render: Format.initialChunkRenderState, answer: "", done: undefined as Done | undefined })
    yield* provider.generate(request).pipe(
      Stream.runForEach((chunk) =>
        Effect.gen(function*() {
          const current = yield* Ref.get(state)
          const [output, render] = Format.renderChunk(current.render, chunk, { thoughts, style })
          yield* Ref.set(state, {
            render,
            answer: chunk._tag === "Text" && chunk.channel === "answer" ? current.answer + chunk.text : current.answer,
            done: chunk._tag === "Done" ? chunk : current.done
          })
          yield* settings.json ? Terminal.write(`${Format.jsonEvent(chunk, conversation.id)}\n`) : Terminal.write(output)
        })
      )
    )
    const { answer, done } = yield* Ref.get(state)
    if (!settings.json && done !== undefined) {
      yield* Terminal.writeError(`${Format.dim(Terminal.stderrStyle())(Format.doneSummary(done))}\n`)
    }
    return {
      id: conversation.id,
      messages: [...request.messages, { role: "assistant", content: answer }],
      checkpoint: done?.checkpoint
    } satisfies Conversation
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

const interactive = (provider: Provider["Type"], settings: ChatSettings) =>
  Effect.gen(function*() {
    const tty = process.stdin.isTTY === true && !settings.json
    const prompt = tty ? Terminal.write(Format.bold(Terminal.stdoutStyle())("> ")) : Effect.void
    if (tty) {
      yield* Terminal.writeError(
        `${Format.dim(Terminal.stderrStyle())("One turn per line; /new starts a new conversation, /exit or Ctrl-D ends.")}\n`
      )
    }
    const conversation = yield* Ref.make(newConversation(settings))
    yield* prompt
    yield* stdinLines.pipe(
      Stream.map((line) => line.trim()),
      Stream.takeWhile((line) => line !== "/exit"),
      Stream.runForEach((line) =>
        Effect.gen(function*() {
          if (line === "/new") {
            yield* Ref.set(conversation, newConversation(settings, `cli-${Crypto.randomUUID()}`))
          } else if (line !== "") {
            yield* Ref.set(conversation, yield* turn(provider, settings, yield* Ref.get(conversation), line))
          }
          yield* prompt
        })
      )
    )
    if (tty) yield* Terminal.write("\n")
  })

export const chat = (settings: ChatSettings) =>
  Effect.gen(function*() {
    const provider = yield* Provider
    yield* Option.match(settings.prompt, {
      onNone: () => interactive(provider, settings),
      onSome: (prompt) => Effect.asVoid(turn(provider, settings, newConversation(settings), prompt))
    })
  }).pipe(Remote.withClient(settings.socket))

export const command = Command.make("chat", { ...options, ...args }, chat).pipe(
  Command.withDescription("Chat with the generation model of a running server (one prompt, or interactive)")
)
