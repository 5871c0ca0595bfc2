/**
 * Continuation reuse for clients that resend the whole history (every OpenAI and Ollama client).
 * A request may name a conversation key; the runtime's conversation is then `http:<key>`, and the
 * key's last turn is remembered: the messages sent and the reply as the client will resend it
 * (its answer text and tool calls), with the turn's checkpoint. When the next request's messages
 * begin with exactly that turn and add a new one, it runs as a continuation of the checkpoint (the
 * cached prompt and output are reused, not re-prefilled); otherwise it runs as a plain turn of
 * the conversation (its slot's prefix still reused). A checkpoint the runtime no longer holds is
 * dropped and the request runs as a plain turn: nothing fails for a stale key.
 *
 * Keys are bounded (least recently used forgotten first). Thoughts are not compared: clients
 * drop `reasoning_content`, and the runtime holds what was generated anyway.
 *
 * Where the keys' last turns are kept is `KeyedTurns`: in this server's memory unless the context
 * has another (a cluster runner keeps them in the cluster's storage, src/cluster/SharedKeys.ts, so
 * a client that reaches another runner with the same key continues its conversation there). A
 * turn is remembered before its Done chunk reaches the client, so the client's next request finds
 * it wherever it goes.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import { ChatMessage, Checkpoint, type GenerateChunk, type GenerateRequest } from "../domain/Inference.js"
import { tapChunks } from "../internal/ChunkTap.js"
import { Provider } from "../services/Provider.js"
import type { ProviderError } from "../services/ProviderError.js"

/** Longest conversation key a client may send (the runtime's id adds the `http:` prefix). */
export const MAX_KEY_LENGTH = 200
/** Keys remembered at once. */
export const MAX_KEYS = 1024

export class KeyedConversations extends Context.Tag("nativegen/http/KeyedConversations")<KeyedConversations, {
  /**
   * The generation for `request` under the client's conversation key (none: a plain generation).
   * The key must be 1 to MAX_KEY_LENGTH characters (the API checks it and names its field).
   */
  readonly generate: (key: string | undefined, request: GenerateRequest) => Stream.Stream<GenerateChunk, ProviderError>
}>() {}

/** A key's last turn: the messages sent, then the reply as the client resends it; and the turn's checkpoint. */
export const KeyedTurn = Schema.Struct({
  messages: Schema.Array(ChatMessage),
  checkpoint: Checkpoint
})
export type KeyedTurn = typeof KeyedTurn.Type

/** Where each key's last turn is kept. Neither call fails: a turn that cannot be read or kept is a turn not known. */
export class KeyedTurns extends Context.Tag("nativegen/http/KeyedTurns")<KeyedTurns, {
  readonly get: (key: string) => Effect.Effect<KeyedTurn | undefined>
  readonly set: (key: string, turn: KeyedTurn) => Effect.Effect<void>
}>() {}

/** This server's own memory of keys: at most MAX_KEYS, the least recently used forgotten first. */
export const inMemory = (): KeyedTurns["Type"] => {
  /** Insertion order is recency: a key used again is moved to the end. */
  const turns = new Map<string, KeyedTurn>()
  return KeyedTurns.of({
    get: (key) => Effect.sync(() => turns.get(key)),
    set: (key, turn) =>
      Effect.sync(() => {
        turns.delete(key)
        turns.set(key, turn)
        if (turns.size > MAX_KEYS) turns.delete(turns.keys().next().value!)
      })
  })
}

/** What of a message a resent history must repeat: role, content, tool calls (name and arguments), tool call id. */
const sameMessage = (a: ChatMessage, b: ChatMessage) =>
  a.role === b.role &&
  a.content === b.content &&
  (a.toolCallId ?? null) === (b.toolCallId ?? null) &&
  JSON.stringify((a.toolCalls ?? []).map((c) => [c.name, c.arguments])) ===
    JSON.stringify((b.toolCalls ?? []).map((c) => [c.name, c.arguments]))

/** Whether `messages` repeat `turn` and add at least one message after it. */
export const extendsTurn = (messages: ReadonlyArray<ChatMessage>, turn: ReadonlyArray<ChatMessage>) =>
  messages.length > turn.length && turn.every((m, i) => sameMessage(m, messages[i]!))

/** The assistant message a client resends for a generation's chunks. */
export const replyOf = (chunks: ReadonlyArray<GenerateChunk>): ChatMessage => {
  let content = ""
  const toolCalls: Array<{ id: string; name: string; arguments: { readonly [key: string]: unknown } }> = []
  for (const chunk of chunks) {
    if (chunk._tag === "Text" && chunk.channel === "answer") content += chunk.text
    if (chunk._tag === "ToolCall") toolCalls.push({ id: chunk.id, name: chunk.name, arguments: chunk.arguments })
  }
  return { role: "assistant", content, ...(toolCalls.length === 0 ? {} : { toolCalls }) }
}

/**
 * A generation's stream that, when its Done chunk carries a checkpoint, runs `record` with the
 * reply (as `replyOf` reads the chunks before it) and the checkpoint, before Done goes on: whoever
 * holds the checkpoint then finds what was recorded with it. Per chunk of the stream (ChunkTap).
 */
export const recordingReply = (record: (reply: ChatMessage, checkpoint: Checkpoint) => Effect.Effect<void>) =>
<E, R>(chunks: Stream.Stream<GenerateChunk, E, R>): Stream.Stream<GenerateChunk, E, R> =>
  Stream.suspend(() => {
    const seen: Array<GenerateChunk> = []
    return chunks.pipe(
      tapChunks((batch) => {
        let checkpoint: Checkpoint | undefined
        for (const chunk of batch) {
          if (chunk._tag === "Done") checkpoint = chunk.checkpoint
          else seen.push(chunk)
        }
        return checkpoint === undefined ? Effect.void : record(replyOf(seen), checkpoint)
      })
    )
  })

export const make = Effect.gen(function*() {
  const provider = yield* Provider
  // A cluster runner's context holds the cluster-wide keys; a single server keeps its own.
  const turns = Option.getOrElse(yield* Effect.serviceOption(KeyedTurns), inMemory)

  const generate = (key: string | undefined, request: GenerateRequest): Stream.Stream<GenerateChunk, ProviderError> => {
    if (key === undefined) return provider.generate(request)
    const conversation = `http:${key}`
    const plain: GenerateRequest = { ...request, conversation }
    if (request.prompt !== undefined) return provider.generate(plain)
    return Stream.unwrap(Effect.map(turns.get(key), (last) => {
      const continued = last !== undefined && extendsTurn(request.messages, last.messages)
      const run = continued
        ? provider.generate({ ...plain, checkpoint: last.checkpoint }).pipe(
          // Refused before any output (the checkpoint is checked first): run it as a plain turn.
          Stream.catchTag("InvalidCheckpoint", () => provider.generate(plain))
        )
        : provider.generate(plain)
      return run.pipe(recordingReply((reply, checkpoint) => turns.set(key, { messages: [...request.messages, reply], checkpoint })))
    }))
  }

  return KeyedConversations.of({ generate })
})

export const layer: Layer.Layer<KeyedConversations, never, Provider> = Layer.effect(KeyedConversations, make)
