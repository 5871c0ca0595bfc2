/**
 * Conversations: what each conversation's sequence holds, and proof of it. After every turn the
 * conversation's tokens (prompt and output) are recorded with their hash; the client gets a
 * checkpoint (conversation, token count, hash) and hands it back on the next turn, where it is
 * checked against the record (memory, or the state file on disk) before anything is reused.
 *
 * When a conversation's slot is taken over (LRU), its KV state is saved to a state file bound to
 * the model's digest and the token hash, with a sidecar naming both and the state file's own
 * sha256; on its next turn the sidecar and the file are verified before the file reaches the
 * engine, then the state is restored into the slot. On a graceful stop every conversation held in
 * a slot is saved the same way, so checkpoints survive a restart of the runtime.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs"
import * as Path from "node:path"
import * as FileHash from "../domain/FileHash.js"
import type { Checkpoint } from "../domain/Inference.js"
import { NativeWorker } from "./NativeWorker.js"
import { InvalidCheckpoint } from "./ProviderError.js"

export interface ConversationsConfigShape {
  /** Where state files live (one subdirectory per model digest); undefined: nothing is saved. */
  readonly directory: string | undefined
  /** sha256 of the generation model: state files of any other model are refused. */
  readonly modelDigest: string
  /** State files kept per model; the least recently saved beyond this are deleted. Default 32. */
  readonly maxSaved?: number | undefined
}

export class ConversationsConfig extends Context.Tag("nativegen/ConversationsConfig")<
  ConversationsConfig,
  ConversationsConfigShape
>() {}

/** sha256 over the token ids as little-endian u32, hex. */
export const hashTokens = (tokens: ReadonlyArray<number>): string => {
  const bytes = Buffer.alloc(tokens.length * 4)
  tokens.forEach((t, i) => bytes.writeUInt32LE(t, i * 4))
  return Crypto.createHash("sha256").update(bytes).digest("hex")
}

export const checkpointOf = (conversation: string, tokens: ReadonlyArray<number>): Checkpoint => ({
  conversation,
  tokens: tokens.length,
  hash: hashTokens(tokens)
})

const Sidecar = Schema.Struct({
  version: Schema.Literal(1),
  conversation: Schema.String,
  modelDigest: Schema.String,
  tokens: Schema.Array(Schema.NonNegativeInt),
  hash: Schema.String,
  stateSha256: Schema.String
})
type Sidecar = typeof Sidecar.Type

interface Held {
  readonly tokens: ReadonlyArray<number>
  /** The slot whose KV holds the tokens, in engine incarnation `incarnation`; undefined when not in a slot. */
  readonly slot: number | undefined
  readonly incarnation: number
}

/** What a verified checkpoint proves: the conversation's tokens up to it. */
export interface Verified {
  readonly tokens: ReadonlyArray<number>
}

const sha256File = (path: string) => Effect.map(FileHash.hashFile(path), (h) => h.hex)

const writeFileAtomic = (path: string, data: string) =>
  Effect.try(() => {
    const temp = `${path}.${process.pid}.${Crypto.randomBytes(4).toString("hex")}.tmp`
    const fd = Fs.openSync(temp, "wx", 0o600)
    try {
      Fs.writeSync(fd, data)
      Fs.fsyncSync(fd)
    } finally {
      Fs.closeSync(fd)
    }
    Fs.renameSync(temp, path)
  })

export class Conversations extends Context.Tag("nativegen/Conversations")<Conversations, {
  /** Checks a checkpoint against what is held for its conversation (memory or disk). */
  readonly verify: (checkpoint: Checkpoint) => Effect.Effect<Verified, InvalidCheckpoint>
  /**
   * Makes `slot` ready for `conversation` before its turn: saves the conversation `evicted` from
   * it (if any), and restores `conversation` from its verified state file when it is not in the
   * slot. Returns whether it was restored.
   */
  readonly attach: (conversation: string, slot: number, evicted: string | undefined) => Effect.Effect<boolean, InvalidCheckpoint>
  /** Records what the conversation's slot holds after a turn; returns its checkpoint. */
  readonly record: (conversation: string, slot: number, tokens: ReadonlyArray<number>) => Effect.Effect<Checkpoint>
  /** The tokens recorded for a conversation in memory, if any. */
  readonly held: (conversation: string) => ReadonlyArray<number> | undefined
}>() {}

export const make = Effect.gen(function*() {
  const config = yield* ConversationsConfig
  const worker = yield* NativeWorker
  const held = new Map<string, Held>()
  const directory = config.directory === undefined ? undefined : Path.join(config.directory, config.modelDigest)
  if (directory !== undefined) yield* Effect.sync(() => Fs.mkdirSync(directory, { recursive: true, mode: 0o700 }))

  const refuse = (conversation: string, reason: string) => new InvalidCheckpoint({ conversation, reason })

  const files = (conversation: string) => {
    const name = Crypto.createHash("sha256").update(conversation).digest("hex")
    return directory === undefined
      ? undefined
      : { sidecar: Path.join(directory, `${name}.json`), state: Path.join(directory, `${name}.state`) }
  }

  /** The verified sidecar of a conversation's state file, or undefined when there is none. */
  const readSidecar = (conversation: string) =>
    Effect.gen(function*() {
      const paths = files(conversation)
      if (paths === undefined || !Fs.existsSync(paths.sidecar)) return undefined
      const text = yield* Effect.try(() => Fs.readFileSync(paths.sidecar, "utf8")).pipe(
        Effect.mapError(() => refuse(conversation, "its state file's record cannot be read"))
      )
      const sidecar = yield* Schema.decodeUnknown(Schema.parseJson(Sidecar))(text).pipe(
        Effect.mapError(() => refuse(conversation, "its state file's record is malformed"))
      )
      if (sidecar.modelDigest !== config.modelDigest) {
        return yield* refuse(conversation, `its state file was made by model ${sidecar.modelDigest}, not ${config.modelDigest}`)
      }
      if (sidecar.conversation !== conversation) return yield* refuse(conversation, "its state file belongs to another conversation")
      if (hashTokens(sidecar.tokens) !== sidecar.hash) return yield* refuse(conversation, "its state file's token hash does not match")
      return { sidecar, paths }
    })

  const verify = (checkpoint: Checkpoint) =>
    Effect.gen(function*() {
      const conversation = checkpoint.conversation
      const memory = held.get(conversation)
      const tokens = memory?.tokens ?? (yield* readSidecar(conversation))?.sidecar.tokens
      if (tokens === undefined) return yield* refuse(conversation, "nothing is held for this conversation")
      if (!Number.isSafeInteger(checkpoint.tokens) || checkpoint.tokens <= 0 || checkpoint.tokens > tokens.length) {
        return yield* refuse(conversation, `checkpoint of ${checkpoint.tokens} tokens is beyond the ${tokens.length} held`)
      }
      const prefix = tokens.slice(0, checkpoint.tokens)
      if (hashTokens(prefix) !== checkpoint.hash) {
        return yield* refuse(conversation, `hash ${checkpoint.hash} does not match the held tokens`)
      }
      return { tokens: prefix }
    })

  /** Saves the conversation held in `slot` to disk, if it is still there in this engine child. */
  const save = (conversation: string) =>
    Effect.gen(function*() {
      const h = held.get(conversation)
      const paths = files(conversation)
      if (h === undefined || h.slot === undefined || paths === undefined) return
      const saved = yield* worker.saveState(h.slot, paths.state)
      held.set(conversation, { ...h, slot: undefined })
      // A state from another incarnation than the record's would be an empty sequence.
      if (saved.incarnation !== h.incarnation) return
      const sidecar: Sidecar = {
        version: 1,
        conversation,
        modelDigest: config.modelDigest,
        tokens: h.tokens,
        hash: hashTokens(h.tokens),
        stateSha256: yield* sha256File(paths.state)
      }
      yield* writeFileAtomic(paths.sidecar, JSON.stringify(sidecar))
      yield* prune
    }).pipe(
      Effect.catchAll((e) => Effect.logWarning(`conversation ${conversation} could not be saved: ${e.message}`))
    )

  /**
   * Keeps the state files bounded (each is the conversation's whole KV cache, ~16 KiB per token on
   * the bench model): beyond `maxSaved`, the least recently saved are deleted, sidecar first, so a
   * state file is never trusted without its record.
   */
  const prune = Effect.try(() => {
    if (directory === undefined) return
    const sidecars = Fs.readdirSync(directory)
      .filter((name) => name.endsWith(".json"))
      .map((name) => ({ name, saved: Fs.statSync(Path.join(directory, name)).mtimeMs }))
      .sort((a, b) => b.saved - a.saved)
    for (const { name } of sidecars.slice(config.maxSaved ?? 32)) {
      Fs.rmSync(Path.join(directory, name), { force: true })
      Fs.rmSync(Path.join(directory, name.replace(/\.json$/, ".state")), { force: true })
    }
  })

  const attach = (conversation: string, slot: number, evicted: string | undefined) =>
    Effect.gen(function*() {
      if (evicted !== undefined) yield* save(evicted)
      const incarnation = (yield* worker.readiness).incarnation
      const h = held.get(conversation)
      if (h !== undefined && h.slot === slot && h.incarnation === incarnation) return false
      const found = yield* readSidecar(conversation)
      if (found === undefined) return false
      if ((yield* sha256File(found.paths.state).pipe(Effect.orElseSucceed(() => ""))) !== found.sidecar.stateSha256) {
        return yield* refuse(conversation, "its state file does not match the sha256 its record names")
      }
      const restored = yield* worker.restoreState(slot, found.paths.state).pipe(
        Effect.mapError((e) => refuse(conversation, `its state file could not be restored: ${e.message}`))
      )
      held.set(conversation, { tokens: found.sidecar.tokens, slot, incarnation })
      yield* Effect.logDebug(`conversation ${conversation} restored: ${restored.tokens} tokens`)
      return true
    })

  const record = (conversation: string, slot: number, tokens: ReadonlyArray<number>) =>
    Effect.map(worker.readiness, (r) => {
      // Another conversation recorded in this slot is no longer there.
      for (const [c, h] of held) if (c !== conversation && h.slot === slot) held.set(c, { ...h, slot: undefined })
      held.set(conversation, { tokens, slot, incarnation: r.incarnation })
      return checkpointOf(conversation, tokens)
    })

  // A graceful stop saves every conversation still held in a slot.
  yield* Effect.addFinalizer(() => Effect.suspend(() => Effect.forEach(Array.from(held.keys()), save, { discard: true })))

  return Conversations.of({
    verify,
    attach,
    record,
    held: (conversation) => held.get(conversation)?.tokens
  })
})

export const layer: Layer.Layer<Conversations, never, ConversationsConfig | NativeWorker> = Layer.scoped(Conversations, make)

/** sha256 of a model file, hex (the digest state files are bound to when a model comes by path). */
export const digestOfFile = (path: string) => Effect.orDie(sha256File(path))
