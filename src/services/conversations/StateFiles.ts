/**
 * StateFiles: one model's directory of conversation state files, and the rules that decide whether
 * a file may reach the engine. Each conversation has `<sha256(conversation)>.json`, its sidecar (the
 * conversation's token record, and what its state file is bound to), and `<…>.state`, node-llama-cpp's
 * sequence state (the KV cache).
 *
 * Saving is atomic: the engine writes and fsyncs a temp file; here its size is checked and it is
 * hashed, renamed into place, then the sidecar is written (temp, fsync, rename) and the directory
 * fsynced. A crash at any point leaves the old pair, a temp file (swept at the next start), or a new
 * state file under the old sidecar (refused by its sha256, then recomputed).
 *
 * Refusals are per file. A state file that is missing, of the wrong size or sha256, or bound to
 * another node-llama-cpp/llama.cpp version or context size is moved aside and the sidecar rewritten
 * without it: the conversation's tokens stay valid and its history is recomputed. A sidecar that
 * cannot be read, names another model or conversation, or whose tokens do not match its hash is
 * moved aside with its state file: it proves nothing. Moved-aside files are named
 * `<file>.bad-<reason>-<epoch ms>`; the newest `maxMovedAside` are kept.
 */
import * as Clock from "effect/Clock"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as Crypto from "node:crypto"
import * as Path from "node:path"
import * as FileHash from "../../domain/FileHash.js"
import * as Fs from "../store/Fs.js"
import { hashTokens } from "./TokenHash.js"

/** Why a file was refused; part of the moved-aside file's name. */
export type Reason =
  | "missing"
  | "not-a-file"
  | "size"
  | "sha256"
  | "engine-version"
  | "context-size"
  | "record-version"
  | "restore-failed"
  | "model"
  | "conversation"
  | "record-hash"
  | "record-malformed"

/** What a state file is bound to besides the model: the engine that wrote it and its context size. */
export interface EngineBinding {
  readonly nodeLlamaCppVersion: string
  readonly llamaCppRelease: string
  readonly contextSize: number
}

const Token = Schema.Int.pipe(Schema.between(0, 0xffff_ffff))

const StateBinding = Schema.Struct({
  sha256: Schema.String.pipe(Schema.pattern(/^[0-9a-f]{64}$/)),
  bytes: Schema.NonNegativeInt,
  nodeLlamaCppVersion: Schema.String,
  llamaCppRelease: Schema.String,
  contextSize: Schema.Int
})
export type StateBinding = typeof StateBinding.Type

const SidecarV2 = Schema.Struct({
  version: Schema.Literal(2),
  conversation: Schema.String,
  modelDigest: Schema.String,
  tokens: Schema.Array(Token),
  hash: Schema.String,
  /** The state file it binds; null when the conversation has only its token record on disk. */
  state: Schema.NullOr(StateBinding)
})

/** Version 1 bound the state file to the model and its sha256 only: its tokens count, its state does not. */
const SidecarV1 = Schema.Struct({
  version: Schema.Literal(1),
  conversation: Schema.String,
  modelDigest: Schema.String,
  tokens: Schema.Array(Token),
  hash: Schema.String,
  stateSha256: Schema.String
})

const decodeSidecar = Schema.decodeUnknownEither(Schema.parseJson(Schema.Union(SidecarV2, SidecarV1)))

/** What the disk holds for a conversation. */
export interface Stored {
  readonly tokens: Uint32Array
  /** The state file's binding; undefined when none is bound; "version-1" when the sidecar is too old to bind one. */
  readonly state: StateBinding | "version-1" | undefined
}

/** A conversation's sidecar was refused (and moved aside with its state file). */
export class RecordRefused extends Data.TaggedError("RecordRefused")<{
  readonly conversation: string
  readonly reason: Reason
  readonly detail: string
}> {
  override get message() {
    return `its record on disk was refused (${this.reason}: ${this.detail})`
  }
}

/** A save that did not complete: the temp file is removed, the previous pair (if any) left alone. */
export class SaveFailed extends Data.TaggedError("SaveFailed")<{ readonly path: string; readonly reason: string }> {
  override get message() {
    return `state file ${this.path} not saved: ${this.reason}`
  }
}

export interface Options {
  /** The model's own directory. */
  readonly directory: string
  readonly modelDigest: string
  /** Sidecars (and their state files) kept; the least recently saved beyond this are deleted. */
  readonly maxSaved: number
  /** Moved-aside files kept, newest first. */
  readonly maxMovedAside: number
}

/** Sidecars beyond this size are refused unread (a full 128K-token record is ~1 MiB of JSON). */
const MAX_SIDECAR_BYTES = 16 * 1024 * 1024

const SIDECAR = /^[0-9a-f]{64}\.json$/
const STATE = /^([0-9a-f]{64})\.state$/
const MOVED_ASIDE = /\.bad-[a-z0-9-]+-(\d+)$/
const TEMP = /\.tmp-(\d+)-[0-9a-f]+$/

const reasonOf = (e: unknown) =>
  e instanceof Fs.FsError ? `${e.op} ${e.code}` : e instanceof Error ? e.message : String(e)

const isAlive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch (e) {
    return typeof e === "object" && e !== null && "code" in e && e.code === "EPERM"
  }
}

export const make = (options: Options) =>
  Effect.gen(function*() {
    const directory = options.directory
    yield* Effect.orDie(Fs.mkdirRecursive(directory))

    const nameOf = (conversation: string) => Crypto.createHash("sha256").update(conversation).digest("hex")
    const sidecarPath = (conversation: string) => Path.join(directory, `${nameOf(conversation)}.json`)
    const statePath = (conversation: string) => Path.join(directory, `${nameOf(conversation)}.state`)
    const tempOf = (path: string) => `${path}.tmp-${process.pid}-${Crypto.randomBytes(4).toString("hex")}`

    const warn = (conversation: string, reason: Reason, message: string) =>
      Effect.logWarning(message).pipe(Effect.annotateLogs({ service: "Conversations", conversation, reason }))

    /** Deletes beyond the bounds: the least recently saved sidecars (sidecar first, then its state), orphaned state files, old moved-aside files. */
    const prune = Effect.gen(function*() {
      const names = yield* Fs.readdir(directory)
      const dated = (name: string) =>
        Fs.lstat(Path.join(directory, name)).pipe(
          Effect.map((st) => ({ name, at: Number(st.mtimeMs) })),
          Effect.catchAll(() => Effect.succeed(undefined))
        )
      const newestFirst = (list: ReadonlyArray<{ name: string; at: number } | undefined>) =>
        list.flatMap((e) => (e === undefined ? [] : [e])).sort((a, b) => b.at - a.at)
      const remove = (name: string) => Effect.ignore(Fs.unlink(Path.join(directory, name)))
      const sidecars = newestFirst(yield* Effect.forEach(names.filter((n) => SIDECAR.test(n)), dated))
      for (const { name } of sidecars.slice(options.maxSaved)) {
        yield* remove(name)
        yield* remove(name.replace(/\.json$/, ".state"))
      }
      const kept = new Set(sidecars.slice(0, options.maxSaved).map((s) => s.name.slice(0, 64)))
      for (const name of names) {
        const state = STATE.exec(name)
        if (state !== null && !kept.has(state[1]!)) yield* remove(name)
      }
      // Newest by the time in the name (when it was moved aside; a rename keeps the file's mtime).
      const movedAside = names.flatMap((name) => {
        const at = MOVED_ASIDE.exec(name)
        return at === null ? [] : [{ name, at: Number(at[1]) }]
      }).sort((a, b) => b.at - a.at)
      for (const { name } of movedAside.slice(options.maxMovedAside)) yield* remove(name)
    })

    /** Renames a file to `<file>.bad-<reason>-<time>`; returns the new path, or undefined when there was nothing to move. */
    const moveAside = (path: string, reason: Reason) =>
      Effect.gen(function*() {
        const target = `${path}.bad-${reason}-${yield* Clock.currentTimeMillis}`
        return yield* Fs.rename(path, target).pipe(
          Effect.as<string | undefined>(target),
          Fs.catchCodes(["ENOENT"], () => Effect.succeed(undefined))
        )
      })

    const writeSidecar = (conversation: string, tokens: Uint32Array, state: StateBinding | null) =>
      Effect.gen(function*() {
        const path = sidecarPath(conversation)
        const temp = tempOf(path)
        const text = JSON.stringify({
          version: 2,
          conversation,
          modelDigest: options.modelDigest,
          tokens: Array.from(tokens),
          hash: hashTokens(tokens),
          state
        } satisfies typeof SidecarV2.Encoded)
        yield* Effect.acquireUseRelease(
          Fs.open(temp, Fs.O_WRONLY | Fs.O_CREAT | Fs.O_EXCL | Fs.O_NOFOLLOW, 0o600),
          (fd) => Effect.zipRight(Fs.writeAll(fd, temp, Buffer.from(text)), Fs.fsync(fd, temp)),
          Fs.closeQuietly
        ).pipe(Effect.tapError(() => Effect.ignore(Fs.unlink(temp))))
        yield* Fs.rename(temp, path)
      })

    /** Reads the sidecar (never through a symlink, never beyond the size limit); undefined when there is none. */
    const readText = (path: string) =>
      Effect.acquireUseRelease(
        Fs.open(path, Fs.O_RDONLY | Fs.O_NOFOLLOW | Fs.O_NONBLOCK),
        (fd) =>
          Effect.gen(function*() {
            const st = yield* Fs.fstat(fd, path)
            if (!st.isFile()) return yield* Effect.fail(["not-a-file", `its sidecar is a ${Fs.kindOf(st)}`] as const)
            if (st.size > BigInt(MAX_SIDECAR_BYTES)) {
              return yield* Effect.fail(["record-malformed", `its sidecar has ${st.size} bytes, over ${MAX_SIDECAR_BYTES}`] as const)
            }
            const buffer = Buffer.alloc(Number(st.size))
            let done = 0
            while (done < buffer.length) {
              const n = yield* Fs.read(fd, path, buffer, done, buffer.length - done, done)
              if (n === 0) break
              done += n
            }
            return buffer.subarray(0, done).toString("utf8")
          }),
        Fs.closeQuietly
      ).pipe(
        Effect.map((text): string | undefined => text),
        Fs.catchCodes(["ENOENT"], () => Effect.succeed(undefined)),
        Effect.catchAll((e) =>
          Effect.fail(
            e instanceof Fs.FsError
              ? e.code === "ELOOP" ? (["not-a-file", "its sidecar is a symlink"] as const) : (["record-malformed", `its sidecar cannot be read: ${reasonOf(e)}`] as const)
              : e
          )
        )
      )

    /** Moves a refused sidecar and its state file aside, warns, and fails with the refusal. */
    const refuseRecord = (conversation: string, reason: Reason, detail: string) =>
      Effect.gen(function*() {
        const movedTo = yield* Effect.orElseSucceed(moveAside(sidecarPath(conversation), reason), () => undefined)
        yield* Effect.ignore(moveAside(statePath(conversation), reason))
        yield* Effect.ignore(prune)
        yield* warn(
          conversation,
          reason,
          `conversation ${conversation}: its record on disk was refused (${reason}: ${detail}); moved aside${movedTo === undefined ? "" : ` to ${movedTo}`}`
        )
        return yield* new RecordRefused({ conversation, reason, detail })
      })

    /**
     * The conversation's token record on disk and the binding of its state file, or undefined when
     * it has no sidecar. A sidecar that proves nothing is refused (and moved aside, with a warning).
     */
    const readSidecar = (conversation: string): Effect.Effect<Stored | undefined, RecordRefused> =>
      Effect.gen(function*() {
        const text = yield* readText(sidecarPath(conversation)).pipe(Effect.either)
        if (text._tag === "Left") return yield* refuseRecord(conversation, text.left[0], text.left[1])
        if (text.right === undefined) return undefined
        const decoded = decodeSidecar(text.right)
        if (decoded._tag === "Left") return yield* refuseRecord(conversation, "record-malformed", "its sidecar does not decode as a known version")
        const sidecar = decoded.right
        if (sidecar.modelDigest !== options.modelDigest) {
          return yield* refuseRecord(conversation, "model", `it was made by model ${sidecar.modelDigest}, not ${options.modelDigest}`)
        }
        if (sidecar.conversation !== conversation) {
          return yield* refuseRecord(conversation, "conversation", `it belongs to conversation ${sidecar.conversation}`)
        }
        const tokens = Uint32Array.from(sidecar.tokens)
        if (hashTokens(tokens) !== sidecar.hash) return yield* refuseRecord(conversation, "record-hash", "its tokens do not match their hash")
        return { tokens, state: sidecar.version === 1 ? "version-1" : sidecar.state ?? undefined } satisfies Stored
      })

    /**
     * Refuses a conversation's state file: moves it aside, keeps the token record (rewritten
     * without a state file, so the refusal is not repeated), and warns.
     */
    const refuseState = (conversation: string, tokens: Uint32Array, reason: Reason, detail: string) =>
      Effect.gen(function*() {
        const movedTo = yield* Effect.orElseSucceed(moveAside(statePath(conversation), reason), () => undefined)
        yield* writeSidecar(conversation, tokens, null).pipe(
          Effect.zipRight(Fs.fsyncDir(directory)),
          Effect.catchAll((e) => Effect.logWarning(`conversation ${conversation}: its sidecar could not be rewritten: ${reasonOf(e)}`))
        )
        yield* Effect.ignore(prune)
        yield* warn(
          conversation,
          reason,
          `conversation ${conversation}: its state file was refused (${reason}: ${detail})` +
            `${movedTo === undefined ? "" : `, moved aside to ${movedTo}`}; its history is recomputed from its ${tokens.length} tokens`
        )
      })

    /** Why a binding does not fit this engine, or undefined when it does. */
    const bindingRefusal = (state: StateBinding | "version-1", engine: EngineBinding): readonly [Reason, string] | undefined => {
      if (state === "version-1") return ["record-version", "its sidecar is of version 1, which does not bind the engine version and context size"]
      if (state.nodeLlamaCppVersion !== engine.nodeLlamaCppVersion || state.llamaCppRelease !== engine.llamaCppRelease) {
        return [
          "engine-version",
          `it was saved by node-llama-cpp ${state.nodeLlamaCppVersion} (llama.cpp ${state.llamaCppRelease}), this engine is ${engine.nodeLlamaCppVersion} (llama.cpp ${engine.llamaCppRelease})`
        ]
      }
      if (state.contextSize !== engine.contextSize) {
        return ["context-size", `it was saved from a context of ${state.contextSize} tokens, this one has ${engine.contextSize}`]
      }
      return undefined
    }

    /**
     * The path of the conversation's state file when it may reach this engine: bound to it, a
     * regular file of the size and sha256 its sidecar names. Otherwise it is refused (see
     * `refuseState`) and the result is undefined.
     */
    const usableState = (conversation: string, stored: Stored, engine: EngineBinding) =>
      Effect.gen(function*() {
        if (stored.state === undefined) return undefined
        const path = statePath(conversation)
        const binding = stored.state
        const refusal = bindingRefusal(binding, engine) ?? (yield* Effect.gen(function*() {
          if (binding === "version-1") return undefined
          const st = yield* Fs.lstat(path).pipe(Fs.catchCodes(["ENOENT"], () => Effect.succeed(undefined)))
          if (st === undefined) return ["missing", "its state file is missing"] as const
          if (!st.isFile()) return ["not-a-file", `its state file is a ${Fs.kindOf(st)}`] as const
          if (st.size !== BigInt(binding.bytes)) return ["size", `its state file has ${st.size} bytes, its sidecar names ${binding.bytes}`] as const
          const { hex } = yield* FileHash.hashFile(path)
          if (hex !== binding.sha256) return ["sha256", `its state file's sha256 is ${hex}, its sidecar names ${binding.sha256}`] as const
          return undefined
        }).pipe(Effect.catchAll((e) => Effect.succeed(["missing", `its state file cannot be read: ${reasonOf(e)}`] as const))))
        if (refusal === undefined) return path
        yield* refuseState(conversation, stored.tokens, refusal[0], refusal[1])
        return undefined
      })

    /** A fresh temp path for the engine to write the conversation's state to. */
    const tempState = (conversation: string) => tempOf(statePath(conversation))

    /**
     * Publishes a state file the engine wrote (and fsynced) at `temp`: checks its size against the
     * engine's count, hashes it, renames it into place, writes the sidecar, fsyncs the directory.
     * On failure the temp file is removed.
     */
    const commit = (conversation: string, tokens: Uint32Array, temp: string, fileBytes: number, engine: EngineBinding) =>
      Effect.gen(function*() {
        const st = yield* Fs.lstat(temp)
        if (!st.isFile() || st.size !== BigInt(fileBytes)) {
          return yield* new SaveFailed({ path: temp, reason: `it has ${st.size} bytes, the engine wrote ${fileBytes}` })
        }
        const { hex } = yield* FileHash.hashFile(temp)
        yield* Fs.rename(temp, statePath(conversation))
        yield* writeSidecar(conversation, tokens, { sha256: hex, bytes: fileBytes, ...engine })
        yield* Fs.fsyncDir(directory)
        yield* prune
      }).pipe(
        Effect.mapError((e) => (e instanceof SaveFailed ? e : new SaveFailed({ path: temp, reason: reasonOf(e) }))),
        Effect.tapError(() => discard(temp))
      )

    const discard = (temp: string) => Effect.ignore(Fs.unlink(temp))

    // Temp files of processes that died mid-save (this process has written none yet).
    yield* Fs.readdir(directory).pipe(
      Effect.flatMap((names) =>
        Effect.forEach(names, (name) => {
          const temp = TEMP.exec(name)
          return temp !== null && !isAlive(Number(temp[1])) ? Effect.ignore(Fs.unlink(Path.join(directory, name))) : Effect.void
        }, { discard: true })
      ),
      Effect.ignore
    )

    return { readSidecar, usableState, refuseState, tempState, commit, discard, paths: { sidecarPath, statePath } } as const
  })

export type StateFiles = Effect.Effect.Success<ReturnType<typeof make>>

