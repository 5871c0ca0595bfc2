/**
 * Conversations: what each conversation's sequence holds, and proof of it. After every turn the
 * conversation's tokens (prompt and output) are recorded; the client gets a checkpoint
 * (conversation, token count, hash) and hands it back on the next turn, where it is checked
 * against the record (memory, or the sidecar on disk) before anything is reused. Records in memory
 * are bounded (conversations/Records.ts): a conversation dropped from memory stays verifiable from
 * its sidecar; one with neither is unknown.
 *
 * When a conversation's slot is taken over (LRU), its KV state is saved to a state file with a
 * sidecar that binds it (conversations/StateFiles.ts); on its next turn the file is checked before
 * it reaches the engine and restored into the slot. A file that fails a check is moved aside and
 * the turn recomputes the history from the record: a bad file costs a prefill, never the
 * conversation. On a graceful stop every conversation held in a slot is saved the same way, so
 * checkpoints survive a restart of the runtime.
 *
 * Files go through @effect/platform's FileSystem (the runtime provides NodeFileSystem.layer); the
 * settings are ConversationsConfig (conversations/ConversationsConfig.ts, re-exported here).
 */
import type * as FileSystem from "@effect/platform/FileSystem"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Path from "node:path"
import type { Checkpoint } from "../domain/Inference.js"
import * as ConversationsConfig from "./conversations/ConversationsConfig.js"
import { sha256OfFile } from "./conversations/FileSha256.js"
import * as Records from "./conversations/Records.js"
import * as StateFiles from "./conversations/StateFiles.js"
import { hashTokens } from "./conversations/TokenHash.js"
import { NativeWorker, type WorkerReadiness } from "./NativeWorker.js"
import { InvalidCheckpoint } from "./ProviderError.js"

export { hashTokens } from "./conversations/TokenHash.js"
/** The config module (Tag `ConversationsConfig.ConversationsConfig`, `defaults`, `layer`, `layerFromEnv`). */
export * as ConversationsConfig from "./conversations/ConversationsConfig.js"

export const checkpointOf = (conversation: string, tokens: ArrayLike<number>): Checkpoint => ({
  conversation,
  tokens: tokens.length,
  hash: hashTokens(tokens)
})

/** What a verified checkpoint proves: the conversation's tokens up to it. */
export interface Verified {
  readonly tokens: ReadonlyArray<number>
}

/**
 * What the slot holds for the conversation when its turn starts: `resident`, its own KV from its
 * last turn or preparation; `restored`, its KV from its state file; `absent`, nothing of its own
 * (a new conversation, or its history is recomputed from its record).
 */
export type Attached = "resident" | "restored" | "absent"

export class Conversations extends Context.Tag("nativegen/Conversations")<Conversations, {
  /** Checks a checkpoint against what is held for its conversation (memory or disk). */
  readonly verify: (checkpoint: Checkpoint) => Effect.Effect<Verified, InvalidCheckpoint>
  /**
   * Makes `slot` ready for `conversation` before its turn: saves the conversation `evicted` from
   * it (if any), and restores `conversation` from its state file when it is not in the slot and
   * the file passes every check (a file that does not is moved aside: the turn recomputes).
   */
  readonly attach: (conversation: string, slot: number, evicted: string | undefined) => Effect.Effect<Attached>
  /** Records the conversation's tokens after a turn, held in `slot`; returns its checkpoint. */
  readonly record: (conversation: string, slot: number, tokens: ReadonlyArray<number>) => Effect.Effect<Checkpoint>
  /**
   * Notes that a preparation filled `slot` for the conversation. Its record, and so every
   * checkpoint the client holds, is kept; a conversation without one is recorded with `tokens`.
   */
  readonly recordPrepared: (conversation: string, slot: number, tokens: ReadonlyArray<number>) => Effect.Effect<void>
  /** The tokens recorded for a conversation in memory, if any. */
  readonly held: (conversation: string) => ReadonlyArray<number> | undefined
  /**
   * Saves a conversation held in a slot to its state file and forgets it here, as when its slot
   * is taken over: for a conversation that moves to another runtime sharing the directory (a
   * cluster runner giving up its shard). Nothing to do when no slot holds it.
   */
  readonly handOver: (conversation: string) => Effect.Effect<void>
}>() {}

/** What a state file must be bound to for the engine now running, when it is known. */
const engineBinding = (ready: WorkerReadiness): StateFiles.EngineBinding | undefined => {
  const generation = ready.models.find((m) => m.role === "generation")
  return ready.hello === undefined || generation === undefined
    ? undefined
    : {
      nodeLlamaCppVersion: ready.hello.nodeLlamaCppVersion,
      llamaCppRelease: ready.hello.llamaCppRelease,
      backend: ready.hello.backend,
      contextSize: generation.contextSize
    }
}

export const make = Effect.gen(function*() {
  const config = yield* ConversationsConfig.ConversationsConfig
  const worker = yield* NativeWorker
  const records = Records.make({ maxConversations: config.maxHeldConversations, maxBytes: config.maxHeldBytes })
  /** The conversation whose record claims each slot. */
  const occupant = new Map<number, string>()
  const files = config.directory === undefined ? undefined : yield* StateFiles.make({
    directory: Path.join(config.directory, config.modelDigest),
    modelDigest: config.modelDigest,
    maxSaved: config.maxSaved,
    maxMovedAside: config.maxMovedAside
  })
  /** State files and sidecars are read and written one operation at a time. */
  const disk = yield* Effect.makeSemaphore(1)
  const serialized = disk.withPermits(1)

  const refuse = (conversation: string, reason: string) => new InvalidCheckpoint({ conversation, reason })

  /** Stores a record; the slot it names is no longer claimed by any other conversation's record. */
  const claim = (conversation: string, held: Records.Held) => {
    const previous = records.peek(conversation)
    if (previous?.slot !== undefined && previous.slot !== held.slot && occupant.get(previous.slot) === conversation) {
      occupant.delete(previous.slot)
    }
    if (held.slot !== undefined) {
      const other = occupant.get(held.slot)
      if (other !== undefined && other !== conversation) records.release(other)
      occupant.set(held.slot, conversation)
    }
    records.set(conversation, held)
  }

  /** The conversation's token record: memory, else its sidecar. */
  const recordOf = (conversation: string): Effect.Effect<Uint32Array | undefined, InvalidCheckpoint> =>
    Effect.suspend(() => {
      const memory = records.get(conversation)
      if (memory !== undefined || files === undefined) return Effect.succeed(memory?.tokens)
      return serialized(files.readSidecar(conversation)).pipe(
        Effect.map((stored) => stored?.tokens),
        Effect.mapError((e) => refuse(conversation, `${e.message}; moved aside`))
      )
    })

  const verify = Effect.fn("Conversations.verify")(function*(checkpoint: Checkpoint) {
    const conversation = checkpoint.conversation
    const tokens = yield* recordOf(conversation)
    if (tokens === undefined) {
      return yield* refuse(conversation, "nothing is held for this conversation (unknown, or forgotten with no record on disk)")
    }
    if (!Number.isSafeInteger(checkpoint.tokens) || checkpoint.tokens <= 0 || checkpoint.tokens > tokens.length) {
      return yield* refuse(conversation, `checkpoint of ${checkpoint.tokens} tokens is beyond the ${tokens.length} held`)
    }
    const prefix = tokens.subarray(0, checkpoint.tokens)
    if (hashTokens(prefix) !== checkpoint.hash) {
      return yield* refuse(conversation, `hash ${checkpoint.hash} does not match the held tokens`)
    }
    return { tokens: Array.from(prefix) }
  })

  /**
   * Saves the conversation held in `slot` (being taken over) to its state file, if its record
   * still claims the slot in the engine child that holds it. Runs to the end once begun; a failure
   * (the child dying mid-save included) leaves the previous state file and sidecar as they were.
   */
  const save = (conversation: string, slot: number) =>
    Effect.gen(function*() {
      const h = records.peek(conversation)
      if (h === undefined || h.slot !== slot) return
      records.release(conversation)
      if (occupant.get(slot) === conversation) occupant.delete(slot)
      if (files === undefined) return
      const temp = files.tempState(conversation)
      const saved = yield* worker.saveState(slot, temp).pipe(Effect.tapError(() => files.discard(temp)))
      const engine = engineBinding(yield* worker.readiness)
      // A state from another incarnation than the record's would be an empty sequence.
      if (saved.incarnation !== h.incarnation || engine === undefined) return yield* files.discard(temp)
      yield* files.commit(conversation, h.tokens, temp, saved.fileBytes, engine)
    }).pipe(
      Effect.catchAll((e) => Effect.logWarning(`conversation ${conversation} could not be saved: ${e.message}`)),
      Effect.annotateLogs({ service: "Conversations", conversation }),
      Effect.uninterruptible
    )

  /** Restores the conversation's state file into `slot` when one passes every check. */
  const restore = (conversation: string, slot: number, files: StateFiles.StateFiles) =>
    Effect.gen(function*() {
      const stored = yield* Effect.orElseSucceed(files.readSidecar(conversation), () => undefined)
      const engine = engineBinding(yield* worker.readiness)
      if (stored === undefined || engine === undefined) return "absent" as const
      const path = yield* files.usableState(conversation, stored, engine)
      if (path === undefined) return "absent" as const
      const restored = yield* Effect.either(worker.restoreState(slot, path))
      if (restored._tag === "Left") {
        yield* files.refuseState(conversation, stored.tokens, "restore-failed", restored.left.message)
        return "absent" as const
      }
      // What the client holds checkpoints of stays the record: memory first (it may be newer).
      const tokens = records.peek(conversation)?.tokens ?? stored.tokens
      claim(conversation, { tokens, slot, incarnation: (yield* worker.readiness).incarnation })
      yield* Effect.logDebug(`conversation ${conversation} restored: ${restored.right.tokens} tokens`)
      return "restored" as const
    })

  const attach = Effect.fn("Conversations.attach")(function*(conversation: string, slot: number, evicted: string | undefined) {
    return yield* serialized(Effect.gen(function*() {
      if (evicted !== undefined) yield* save(evicted, slot)
      const incarnation = (yield* worker.readiness).incarnation
      const memory = records.get(conversation)
      if (memory !== undefined && memory.slot === slot && memory.incarnation === incarnation) return "resident" as const
      return files === undefined ? "absent" as const : yield* restore(conversation, slot, files)
    }))
  })

  const record = (conversation: string, slot: number, tokens: ReadonlyArray<number>) =>
    Effect.map(worker.readiness, (ready) => {
      claim(conversation, { tokens: Uint32Array.from(tokens), slot, incarnation: ready.incarnation })
      return checkpointOf(conversation, tokens)
    })

  const recordPrepared = (conversation: string, slot: number, tokens: ReadonlyArray<number>) =>
    Effect.gen(function*() {
      const kept = yield* recordOf(conversation).pipe(Effect.orElseSucceed(() => undefined))
      const ready = yield* worker.readiness
      claim(conversation, { tokens: kept ?? Uint32Array.from(tokens), slot, incarnation: ready.incarnation })
    })

  // A graceful stop saves every conversation still held in a slot.
  yield* Effect.addFinalizer(() =>
    serialized(Effect.suspend(() =>
      Effect.forEach(Array.from(occupant), ([slot, conversation]) => save(conversation, slot), { discard: true })
    ))
  )

  return Conversations.of({
    verify,
    attach,
    record,
    recordPrepared,
    held: (conversation) => {
      const tokens = records.peek(conversation)?.tokens
      return tokens === undefined ? undefined : Array.from(tokens)
    },
    handOver: (conversation) =>
      serialized(Effect.suspend(() => {
        const slot = records.peek(conversation)?.slot
        return slot === undefined ? Effect.void : save(conversation, slot)
      }))
  })
})

export const layer: Layer.Layer<Conversations, never, ConversationsConfig.ConversationsConfig | NativeWorker | FileSystem.FileSystem> =
  Layer.scoped(Conversations, make)

/** sha256 of a model file, hex (the digest state files are bound to when a model comes by path). */
export const digestOfFile = (path: string) => Effect.orDie(sha256OfFile(path))
