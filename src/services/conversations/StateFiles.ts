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
import { isPlatformError, type PlatformError } from "@effect/platform/Error"
import * as FileSystem from "@effect/platform/FileSystem"
import * as Clock from "effect/Clock"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Crypto from "node:crypto"
import * as Path from "node:path"
import { sha256OfFile } from "./FileSha256.js"
import { hashTokens } from "./TokenHash.js"

/** Why a file was refused; part of the moved-aside file's name. */
export type Reason =
  | "missing"
  | "not-a-file"
  | "size"
  | "sha256"
  | "engine-version"
  | "backend"
  | "context-size"
  | "record-version"
  | "restore-failed"
  | "model"
  | "conversation"
  | "record-hash"
  | "record-malformed"

/**
 * What a state file is bound to besides the model: the engine that wrote it, the backend it ran on
 * (a KV state written by CUDA kernels is not restored into a CPU context, nor the other way), and
 * its context size.
 */
export interface EngineBinding {
  readonly nodeLlamaCppVersion: string
  readonly llamaCppRelease: string
  readonly backend: string
  readonly contextSize: number
}

const Token = Schema.Int.pipe(Schema.between(0, 0xffff_ffff))

const StateBinding = Schema.Struct({
  sha256: Schema.String.pipe(Schema.pattern(/^[0-9a-f]{64}$/)),
  bytes: Schema.NonNegativeInt,
  nodeLlamaCppVersion: Schema.String,
  llamaCppRelease: Schema.String,
  /** Absent in sidecars written before the backend was bound: those were written on the CPU. */
  backend: Schema.optionalWith(Schema.String, { default: () => "cpu" }),
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

const reasonOf = (e: unknown) => (e instanceof Error ? e.message : String(e))

const isNotFound = (e: PlatformError) => e._tag === "SystemError" && e.reason === "NotFound"

/** Recovers from "no such file" with undefined; every other error passes through. */
const orAbsent = <A, E, R>(self: Effect.Effect<A, E | PlatformError, R>): Effect.Effect<A | undefined, E | PlatformError, R> =>
  Effect.catchIf(self, (e): e is PlatformError => isPlatformError(e) && isNotFound(e), () => Effect.succeed(undefined))

/** What kind of file is there, in the words the refusals use. */
const kindOf: { readonly [T in FileSystem.File.Type]: string } = {
  File: "regular file",
  Directory: "directory",
  SymbolicLink: "symlink",
  FIFO: "fifo",
  CharacterDevice: "character device",
  BlockDevice: "block device",
  Socket: "socket",
  Unknown: "unknown file type"
}

/** What is at a path, a final symlink not followed. */
interface Entry {
  readonly type: FileSystem.File.Type
  readonly size: FileSystem.Size
  /** Epoch ms of the last modification; 0 for a symlink. */
  readonly modifiedAt: number
}

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
    const fs = yield* FileSystem.FileSystem
    const directory = options.directory
    yield* Effect.orDie(fs.makeDirectory(directory, { recursive: true, mode: 0o700 }))

    const nameOf = (conversation: string) => Crypto.createHash("sha256").update(conversation).digest("hex")
    const sidecarPath = (conversation: string) => Path.join(directory, `${nameOf(conversation)}.json`)
    const statePath = (conversation: string) => Path.join(directory, `${nameOf(conversation)}.state`)
    const tempOf = (path: string) => `${path}.tmp-${process.pid}-${Crypto.randomBytes(4).toString("hex")}`

    const warn = (conversation: string, reason: Reason, message: string) =>
      Effect.logWarning(message).pipe(Effect.annotateLogs({ service: "Conversations", conversation, reason }))

    /**
     * What is at `path` without following a final symlink, or undefined when nothing is. The
     * platform FileSystem has no lstat: a path that readLink reads is a symlink; any other is stat'ed.
     */
    const entryAt = (path: string): Effect.Effect<Entry | undefined, PlatformError> =>
      fs.readLink(path).pipe(
        Effect.as<Entry | undefined>({ type: "SymbolicLink", size: FileSystem.Size(0), modifiedAt: 0 }),
        Effect.catchTag("SystemError", (e) =>
          isNotFound(e) ? Effect.succeed(undefined) : orAbsent(Effect.map(fs.stat(path), (info): Entry => ({
            type: info.type,
            size: info.size,
            modifiedAt: Option.match(info.mtime, { onNone: () => 0, onSome: (at) => at.getTime() })
          }))))
      )

    /** Removes a file, ignoring failure (it may already be gone). */
    const remove = (path: string) => Effect.ignore(fs.remove(path))

    /** Opens `path` (a directory: opened read-only) and fsyncs it, so that what was written or renamed in it is durable. */
    const fsyncPath = (path: string) => Effect.scoped(Effect.flatMap(fs.open(path, { flag: "r" }), (file) => file.sync))

    /** Deletes beyond the bounds: the least recently saved sidecars (sidecar first, then its state), orphaned state files, old moved-aside files. */
    const prune = Effect.gen(function*() {
      const names = yield* fs.readDirectory(directory)
      const dated = (name: string) =>
        entryAt(Path.join(directory, name)).pipe(
          Effect.map((entry) => (entry === undefined ? undefined : { name, at: entry.modifiedAt })),
          Effect.catchAll(() => Effect.succeed(undefined))
        )
      const newestFirst = (list: ReadonlyArray<{ name: string; at: number } | undefined>) =>
        list.flatMap((e) => (e === undefined ? [] : [e])).sort((a, b) => b.at - a.at)
      const removeName = (name: string) => remove(Path.join(directory, name))
      const sidecars = newestFirst(yield* Effect.forEach(names.filter((n) => SIDECAR.test(n)), dated))
      for (const { name } of sidecars.slice(options.maxSaved)) {
        yield* removeName(name)
        yield* removeName(name.replace(/\.json$/, ".state"))
      }
      const kept = new Set(sidecars.slice(0, options.maxSaved).map((s) => s.name.slice(0, 64)))
      for (const name of names) {
        const state = STATE.exec(name)
        if (state !== null && !kept.has(state[1]!)) yield* removeName(name)
      }
      // Newest by the time in the name (when it was moved aside; a rename keeps the file's mtime).
      const movedAside = names.flatMap((name) => {
        const at = MOVED_ASIDE.exec(name)
        return at === null ? [] : [{ name, at: Number(at[1]) }]
      }).sort((a, b) => b.at - a.at)
      for (const { name } of movedAside.slice(options.maxMovedAside)) yield* removeName(name)
    })

    /** Renames a file to `<file>.bad-<reason>-<time>`; returns the new path, or undefined when there was nothing to move. */
    const moveAside = (path: string, reason: Reason) =>
      Effect.gen(function*() {
        const target = `${path}.bad-${reason}-${yield* Clock.currentTimeMillis}`
        return yield* orAbsent(Effect.as(fs.rename(path, target), target))
      })

    /** Writes the sidecar: a fresh temp file (never through a symlink: "wx" is O_CREAT|O_EXCL), fsynced, renamed into place. */
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
        yield* Effect.scoped(Effect.flatMap(
          fs.open(temp, { flag: "wx", mode: 0o600 }),
          (file) => Effect.zipRight(file.writeAll(Buffer.from(text)), file.sync)
        )).pipe(Effect.tapError(() => remove(temp)))
        yield* fs.rename(temp, path)
      })

    /**
     * Reads the sidecar: never through a symlink, never anything but a regular file (so never a
     * fifo that would block the open), never beyond the size limit; undefined when there is none.
     */
    const readText = (path: string): Effect.Effect<string | undefined, readonly [Reason, string]> =>
      Effect.gen(function*() {
        const entry = yield* entryAt(path)
        if (entry === undefined) return undefined
        if (entry.type !== "File") return yield* Effect.fail(["not-a-file", `its sidecar is a ${kindOf[entry.type]}`] as const)
        return yield* Effect.scoped(Effect.gen(function*() {
          const file = yield* fs.open(path, { flag: "r" })
          // The descriptor's own stat: what was opened, whatever the path names now.
          const st = yield* file.stat
          if (st.type !== "File") return yield* Effect.fail(["not-a-file", `its sidecar is a ${kindOf[st.type]}`] as const)
          if (st.size > BigInt(MAX_SIDECAR_BYTES)) {
            return yield* Effect.fail(["record-malformed", `its sidecar has ${st.size} bytes, over ${MAX_SIDECAR_BYTES}`] as const)
          }
          const buffer = Buffer.alloc(Number(st.size))
          let done = 0
          while (done < buffer.length) {
            const n = Number(yield* file.read(buffer.subarray(done)))
            if (n === 0) break
            done += n
          }
          return buffer.subarray(0, done).toString("utf8")
        }))
      }).pipe(
        orAbsent,
        Effect.catchAll((e) =>
          Effect.fail(isPlatformError(e) ? (["record-malformed", `its sidecar cannot be read: ${reasonOf(e)}`] as const) : e)
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
          Effect.zipRight(fsyncPath(directory)),
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
      if (state.backend !== engine.backend) {
        return ["backend", `it was saved on the ${state.backend} backend, this engine runs on ${engine.backend}`]
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
          const entry = yield* entryAt(path)
          if (entry === undefined) return ["missing", "its state file is missing"] as const
          if (entry.type !== "File") return ["not-a-file", `its state file is a ${kindOf[entry.type]}`] as const
          if (entry.size !== BigInt(binding.bytes)) return ["size", `its state file has ${entry.size} bytes, its sidecar names ${binding.bytes}`] as const
          const hex = yield* sha256OfFile(path)
          if (hex !== binding.sha256) return ["sha256", `its state file's sha256 is ${hex}, its sidecar names ${binding.sha256}`] as const
          return undefined
        }).pipe(
          Effect.provideService(FileSystem.FileSystem, fs),
          Effect.catchAll((e) => Effect.succeed(["missing", `its state file cannot be read: ${reasonOf(e)}`] as const))
        ))
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
        const entry = yield* entryAt(temp)
        if (entry === undefined) return yield* new SaveFailed({ path: temp, reason: "the engine's file is missing" })
        if (entry.type !== "File" || entry.size !== BigInt(fileBytes)) {
          return yield* new SaveFailed({ path: temp, reason: `it is a ${kindOf[entry.type]} of ${entry.size} bytes, the engine wrote ${fileBytes}` })
        }
        const hex = yield* sha256OfFile(temp)
        yield* fs.rename(temp, statePath(conversation))
        yield* writeSidecar(conversation, tokens, { sha256: hex, bytes: fileBytes, ...engine })
        yield* fsyncPath(directory)
        yield* prune
      }).pipe(
        Effect.provideService(FileSystem.FileSystem, fs),
        Effect.mapError((e) => (e instanceof SaveFailed ? e : new SaveFailed({ path: temp, reason: reasonOf(e) }))),
        Effect.tapError(() => discard(temp))
      )

    const discard = (temp: string) => remove(temp)

    // Temp files of processes that died mid-save (this process has written none yet).
    yield* fs.readDirectory(directory).pipe(
      Effect.flatMap((names) =>
        Effect.forEach(names, (name) => {
          const temp = TEMP.exec(name)
          return temp !== null && !isAlive(Number(temp[1])) ? remove(Path.join(directory, name)) : Effect.void
        }, { discard: true })
      ),
      Effect.ignore
    )

    return { readSidecar, usableState, refuseState, tempState, commit, discard, paths: { sidecarPath, statePath } } as const
  })

export type StateFiles = Effect.Effect.Success<ReturnType<typeof make>>
