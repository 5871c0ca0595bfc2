/**
 * One turn of a chat and the conversation it continues: the request (the system message, the
 * history, the conversation id and the previous turn's checkpoint, so the server reuses what the
 * conversation's sequence holds) and the streamed answer printed as it comes (the thought channel
 * dimmed or hidden; `--json`: one event per chunk), then the usage line on stderr.
 */
import * as Effect from "effect/Effect"
import * as Ref from "effect/Ref"
import * as Stream from "effect/Stream"
import * as Crypto from "node:crypto"
import type { ChatMessage, Checkpoint, GenerateChunk, GenerateRequest } from "../domain/Inference.js"
import type { Provider } from "../services/Provider.js"
import type * as ChatInput from "./ChatInput.js"
import * as Format from "./Format.js"
import * as Terminal from "./Terminal.js"

type Done = Extract<GenerateChunk, { readonly _tag: "Done" }>

/** What a conversation holds between turns (the system message is a setting, sent first with each turn). */
export interface Conversation {
  readonly id: string
  readonly messages: ReadonlyArray<ChatMessage>
  readonly checkpoint: Checkpoint | undefined
}

export const newConversation = (id?: string): Conversation => ({
  id: id ?? `cli-${Crypto.randomUUID()}`,
  messages: [],
  checkpoint: undefined
})

/** The request of the next turn: the system message, the history, the conversation id and the last checkpoint. */
export const nextRequest = (
  conversation: Conversation,
  user: string,
  settings: ChatInput.SessionSettings
): GenerateRequest => ({
  messages: [
    ...(settings.system === undefined ? [] : [{ role: "system" as const, content: settings.system }]),
    ...conversation.messages,
    { role: "user", content: user }
  ],
  conversation: conversation.id,
  ...(conversation.checkpoint === undefined ? {} : { checkpoint: conversation.checkpoint }),
  maxTokens: settings.maxTokens,
  sampling: { temperature: settings.temperature, ...(settings.seed === undefined ? {} : { seed: settings.seed }) },
  ...(settings.think === undefined ? {} : { thinking: settings.think })
})

/** How a turn is shown. `lineOpen` is set while the last text written did not end its line. */
export interface TurnView {
  readonly json: boolean
  readonly hideThoughts: boolean
  readonly lineOpen?: Ref.Ref<boolean>
}

/** Runs one turn: streams and prints the answer; returns the conversation after it. */
export const turn = (
  provider: Provider["Type"],
  view: TurnView,
  settings: ChatInput.SessionSettings,
  conversation: Conversation,
  user: string
) =>
  Effect.gen(function*() {
    const request = nextRequest(conversation, user, settings)
    const style = Terminal.stdoutStyle()
    const thoughts: Format.ThoughtMode = view.hideThoughts ? "hide" : "show"
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
          if (view.json) return yield* Terminal.write(`${Format.jsonEvent(chunk, conversation.id)}\n`)
          yield* Terminal.write(output)
          if (view.lineOpen !== undefined && output !== "") yield* Ref.set(view.lineOpen, !output.endsWith("\n"))
        })
      )
    )
    const { answer, done } = yield* Ref.get(state)
    if (!view.json && done !== undefined) {
      yield* Terminal.writeError(`${Format.dim(Terminal.stderrStyle())(Format.doneSummary(done))}\n`)
    }
    return {
      id: conversation.id,
      messages: [...conversation.messages, { role: "user", content: user }, { role: "assistant", content: answer }],
      checkpoint: done?.checkpoint
    } satisfies Conversation
  })

