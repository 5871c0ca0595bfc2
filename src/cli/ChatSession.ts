/**
 * The interactive chat on a terminal: Node's readline with `terminal: true` (line editing, history
 * with up/down, shared by every prompt of the session), `"""` blocks of several lines, and the
 * session's commands (ChatInput). Each message is a turn of one conversation, sent with the
 * previous turn's checkpoint, so the server continues the sequence it holds.
 *
 * One readline interface serves the whole session, so lines pasted at once all arrive. While an
 * answer is written its output is muted: keys typed meanwhile are kept for the next prompt (a line
 * finished then is sent next) instead of being drawn into the answer, and Ctrl-C interrupts the
 * turn, which interrupts the stream and the engine's generation; the prompt comes back (the
 * stopped turn is not added to the conversation). Ctrl-C at an empty prompt prints a hint, and a second one in a row
 * leaves; Ctrl-C with text typed clears the line; Ctrl-D at an empty prompt leaves.
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Ref from "effect/Ref"
import type * as Scope from "effect/Scope"
import * as Readline from "node:readline"
import { Writable } from "node:stream"
import type { Provider } from "../services/Provider.js"
import { describe } from "./CliError.js"
import * as ChatInput from "./ChatInput.js"
import { type Conversation, newConversation, turn } from "./ChatTurn.js"
import * as Format from "./Format.js"
import * as Terminal from "./Terminal.js"

export interface SessionOptions {
  readonly hideThoughts: boolean
  readonly settings: ChatInput.SessionSettings
  readonly conversation: string | undefined
  readonly socket: string
}

/** What the terminal read: a line (`shown`: echoed as typed), Ctrl-C at the prompt (with what was typed), or the end of input (Ctrl-D). */
type Typed =
  | { readonly _tag: "Line"; readonly line: string; readonly shown: boolean }
  | { readonly _tag: "Interrupt"; readonly typed: string }
  | { readonly _tag: "End" }

/**
 * readline's output: the terminal, or nothing while an answer is written (keys typed then are
 * kept for the next prompt, not drawn into the answer).
 */
class OutputGate extends Writable {
  muted = false
  readonly isTTY = true
  get columns() {
    return process.stdout.columns
  }
  get rows() {
    return process.stdout.rows
  }
  override _write(chunk: Buffer | string, _encoding: BufferEncoding, callback: (error?: Error | null) => void) {
    if (!this.muted) process.stdout.write(chunk)
    callback()
  }
}

/** The session's terminal: one readline interface for the whole session (so pasted lines all arrive). */
interface ChatTerminal {
  /** Shows `prompt` (after what was typed ahead, if anything) and waits for the next input. */
  readonly read: (prompt: string) => Effect.Effect<Typed>
  /** Runs `self` with the keyboard muted; Ctrl-C interrupts it (`None`). */
  readonly whileAnswering: <A>(self: Effect.Effect<A>) => Effect.Effect<Option.Option<A>>
  /** Drops what was typed at the prompt (after Ctrl-C). */
  readonly clearLine: Effect.Effect<void>
}

const openTerminal: Effect.Effect<ChatTerminal, never, Scope.Scope> = Effect.gen(function*() {
  const events = yield* Queue.unbounded<Typed>()
  const gate = new OutputGate()
  let cancel: (() => void) | undefined
  const rl = yield* Effect.acquireRelease(
    Effect.sync(() => {
      const rl = Readline.createInterface({
        input: process.stdin,
        output: gate,
        terminal: true,
        historySize: 1000,
        removeHistoryDuplicates: true
      })
      const resize = () => gate.emit("resize")
      process.stdout.on("resize", resize)
      rl.on("line", (line) => Queue.unsafeOffer(events, { _tag: "Line", line, shown: !gate.muted }))
      rl.on("SIGINT", () => (cancel !== undefined ? cancel() : Queue.unsafeOffer(events, { _tag: "Interrupt", typed: rl.line })))
      rl.on("close", () => {
        process.stdout.off("resize", resize)
        Queue.unsafeOffer(events, { _tag: "End" })
      })
      return rl
    }),
    (rl) => Effect.sync(() => rl.close())
  )
  let closed = false
  rl.on("close", () => (closed = true))

  const read = (prompt: string) =>
    Effect.gen(function*() {
      gate.muted = false
      const ready = yield* Queue.poll(events)
      if (Option.isSome(ready)) {
        const typed = ready.value
        // Typed ahead while an answer was written: show it as if typed now.
        if (typed._tag === "Line" && !typed.shown) yield* Terminal.write(`${prompt}${typed.line}\n`)
        return typed
      }
      if (closed) return { _tag: "End" } as const
      rl.setPrompt(prompt)
      rl.prompt(true)
      return yield* Queue.take(events)
    })

  const whileAnswering = <A>(self: Effect.Effect<A>) =>
    Effect.gen(function*() {
      const interrupted = yield* Deferred.make<void>()
      gate.muted = true
      cancel = () => Deferred.unsafeDone(interrupted, Exit.void)
      return yield* Effect.raceFirst(Effect.map(self, Option.some), Effect.as(Deferred.await(interrupted), Option.none<A>()))
    }).pipe(
      Effect.ensuring(Effect.sync(() => {
        cancel = undefined
      }))
    )

  const clearLine = Effect.sync(() => {
    gate.muted = true
    rl.write(null, { ctrl: true, name: "e" })
    rl.write(null, { ctrl: true, name: "u" })
  })

  return { read, whileAnswering, clearLine }
})

/** The session's state between prompts. */
interface State {
  readonly settings: ChatInput.SessionSettings
  readonly conversation: Conversation
  /** Ctrl-C was pressed at the last (empty) prompt: one more leaves. */
  readonly interrupted: boolean
}

const modelLine = (provider: Provider["Type"]) =>
  provider.readiness.pipe(
    Effect.map((readiness) => {
      const role = readiness.roles.find((r) => r.role === "generation")
      return role === undefined
        ? `no generation model is loaded (${readiness.state})`
        : `${role.model}${role.revision === null ? "" : ` revision ${role.revision}`} (generation)`
    })
  )

export const run = (provider: Provider["Type"], options: SessionOptions) =>
  Effect.scoped(Effect.gen(function*() {
    const dim = Format.dim(Terminal.stderrStyle())
    const note = (text: string) => Terminal.writeError(`${dim(text)}\n`)
    const terminal = yield* openTerminal
    const lineOpen = yield* Ref.make(false)
    const view = { json: false, hideThoughts: options.hideThoughts, lineOpen }
    const prompt = Format.bold(Terminal.stdoutStyle())(">>> ")
    const more = Format.bold(Terminal.stdoutStyle())("... ")
    yield* note(`chat with ${yield* modelLine(provider)}; /? for help, /bye or Ctrl-D to leave, """ for several lines`)
    let state: State = { settings: options.settings, conversation: newConversation(options.conversation), interrupted: false }
    let block: ChatInput.Block = undefined
    for (;;) {
      const typed = yield* terminal.read(block === undefined ? prompt : more)
      if (typed._tag === "End") break
      if (typed._tag === "Interrupt") {
        // Raw mode echoes nothing: end the prompt's line as a shell does, and drop what was typed.
        yield* Terminal.write("\n")
        yield* terminal.clearLine
        if (block !== undefined || typed.typed !== "") {
          block = undefined
          state = { ...state, interrupted: false }
          continue
        }
        if (state.interrupted) break
        yield* note("(Ctrl-C again, Ctrl-D or /bye to leave)")
        state = { ...state, interrupted: true }
        continue
      }
      state = { ...state, interrupted: false }
      const fed = ChatInput.feed(block, typed.line)
      if (fed._tag === "More") {
        block = fed.block
        continue
      }
      block = undefined
      const command: ChatInput.SessionCommand = fed._tag === "Block"
        ? { _tag: "Message", text: fed.text.trim() }
        : ChatInput.parseLine(fed.line)
      switch (command._tag) {
        case "Bye":
          return
        case "Help":
          yield* Terminal.write(`${ChatInput.help}\n`)
          break
        case "Invalid":
          yield* note(command.reason)
          break
        case "Show":
          yield* Terminal.write(
            `model        ${yield* modelLine(provider)} on ${options.socket}\n${ChatInput.settingsText(state.settings)}\n` +
              `conversation ${state.conversation.id} (${state.conversation.messages.length / 2} turns)\n`
          )
          break
        case "Clear":
          state = { ...state, conversation: newConversation() }
          yield* note("a new conversation")
          break
        case "Set":
          state = { ...state, settings: ChatInput.applyChange(state.settings, command.change) }
          yield* note(`set ${command.change.key}`)
          break
        case "Message": {
          if (command.text === "") break
          yield* Ref.set(lineOpen, false)
          const outcome = yield* terminal.whileAnswering(
            Effect.either(turn(provider, view, state.settings, state.conversation, command.text))
          )
          const open = yield* Ref.get(lineOpen)
          if (Option.isNone(outcome)) {
            yield* Terminal.write(open ? "\n" : "")
            yield* note("(stopped)")
          } else if (Either.isLeft(outcome.value)) {
            yield* Terminal.write(open ? "\n" : "")
            yield* Terminal.writeError(`nativegen: ${describe(outcome.value.left)}\n`)
          } else {
            state = { ...state, conversation: outcome.value.right }
          }
        }
      }
    }
    yield* Terminal.write("\n")
  }))
