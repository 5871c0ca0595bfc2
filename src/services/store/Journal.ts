/**
 * The activation journal: append-only JSONL at `<root>/journal.jsonl`, one versioned entry per
 * line: an activation (schema version 1) or a deactivation (`store rm`, schema version 2). The
 * newest entry per (model, device) wins, by journal order: a deactivation hides every activation
 * of its (model, device) before it, and a later activation is active again. Every function here expects
 * the caller to hold the store lock. Reading recovers a torn tail (bytes after the last newline:
 * a partial line or a NUL-filled tail) by copying it to `<root>/recovered/` and truncating; any
 * other defect (a bad line before the tail, a missing field, an unknown version) is a
 * `JournalCorrupt` naming the line. Appends are one write, fsynced; the directory is fsynced
 * after the append that created the file.
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as Crypto from "node:crypto"
import * as Path from "node:path"
import { Digest } from "../../domain/Digest.js"
import { canonicalJson, ModelName, Role } from "../../domain/Manifest.js"
import { JournalCorrupt, type StoreIoError, UnsafePath } from "../StoreError.js"
import * as Fs from "./Fs.js"
import * as SafePath from "./SafePath.js"

/** A device name: `cpu`, `cuda:0`, `vulkan:1`, ... */
export const DeviceName = Schema.String.pipe(Schema.pattern(/^[a-z0-9][a-z0-9:._-]{0,63}$/, { identifier: "DeviceName" }))

/** Journal entry, schema version 1. */
export const EntryV1 = Schema.Struct({
  v: Schema.Literal(1),
  model: ModelName,
  role: Role,
  device: DeviceName,
  /** Digest of the activated manifest (sha256 of its canonical JSON). */
  manifest: Digest,
  revision: Schema.Int.pipe(Schema.positive()),
  /** Wall-clock time of the activation, informational only: order decides, never time. */
  at: Schema.String
})
export type Entry = typeof EntryV1.Type

/**
 * Deactivation entry, schema version 2 (activations are still written as version 1, so a journal
 * without deactivations stays readable by versions that know only version 1; one that has them
 * is refused there as an unknown version, rather than its removed models coming back).
 */
export const DeactivationV2 = Schema.Struct({
  v: Schema.Literal(2),
  op: Schema.Literal("deactivate"),
  model: ModelName,
  device: DeviceName,
  /** The revision that was active: a later activation of an older one is a rollback. */
  revision: Schema.Int.pipe(Schema.positive()),
  at: Schema.String
})
export type Deactivation = typeof DeactivationV2.Type

/** Any line of the journal. */
export type Line = Entry | Deactivation

export const isDeactivation = (line: Line): line is Deactivation => line.v === 2

/** An activation and the 1-based line it was read from. */
export interface Indexed {
  readonly entry: Entry
  readonly line: number
}

/** A deactivation and the 1-based line it was read from. */
export interface IndexedDeactivation {
  readonly entry: Deactivation
  readonly line: number
}

/** What the journal says, in order. */
export interface State {
  /** Every activation, in journal order (those a later deactivation hides among them: see `isHidden`). */
  readonly entries: ReadonlyArray<Indexed>
  /** Newest activation per `key(model, device)`, unless a deactivation came after it. */
  readonly newest: ReadonlyMap<string, Indexed>
  /** Newest deactivation per `key(model, device)`. */
  readonly deactivated: ReadonlyMap<string, IndexedDeactivation>
}

/** True when a deactivation of its (model, device) came after the activation. */
export const isHidden = (state: State, indexed: Indexed): boolean =>
  (state.deactivated.get(key(indexed.entry.model, indexed.entry.device))?.line ?? 0) > indexed.line

export const key = (model: string, device: string) => `${model}\u0000${device}`

export const fileName = "journal.jsonl"
export const recoveredDir = "recovered"

const decodeEntry = Schema.decodeUnknownEither(EntryV1, { onExcessProperty: "error" })
const decodeDeactivation = Schema.decodeUnknownEither(DeactivationV2, { onExcessProperty: "error" })
const utf8 = new TextDecoder("utf-8", { fatal: true })

/** Parses one complete line (without its newline). */
export const parseLine = (bytes: Uint8Array, line: number, path: string): Either.Either<Line, JournalCorrupt> => {
  const corrupt = (reason: string) => Either.left(new JournalCorrupt({ path, line, reason }))
  if (bytes.length === 0) return corrupt("empty line")
  if (bytes.includes(0)) return corrupt("NUL bytes inside the journal")
  let value: unknown
  try {
    value = JSON.parse(utf8.decode(bytes))
  } catch (cause) {
    return corrupt(`not JSON: ${cause instanceof Error ? cause.message : String(cause)}`)
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) return corrupt("not a JSON object")
  if (!("v" in value)) return corrupt("missing field v (schema version)")
  if (value.v !== 1 && value.v !== 2) return corrupt(`unknown schema version ${JSON.stringify(value.v)}`)
  const decoded: Either.Either<Line, ParseResult.ParseError> = value.v === 1 ? decodeEntry(value) : decodeDeactivation(value)
  if (Either.isLeft(decoded)) return corrupt(ParseResult.TreeFormatter.formatErrorSync(decoded.left))
  return Either.right(decoded.right)
}

/** A line of either kind and the 1-based line it was read from. */
export interface IndexedLine {
  readonly entry: Line
  readonly line: number
}

/**
 * Splits a journal's bytes into complete lines and a tail. `entries` are the decoded lines of
 * either kind; `tail` is the byte offset where the torn tail starts (`bytes.length` when there is none).
 */
export const parse = (
  bytes: Uint8Array,
  path: string,
  firstLine = 1
): Either.Either<{ readonly entries: ReadonlyArray<IndexedLine>; readonly tail: number }, JournalCorrupt> => {
  const entries: Array<IndexedLine> = []
  let start = 0
  let line = firstLine
  for (;;) {
    const nl = bytes.indexOf(0x0a, start)
    if (nl < 0) break
    const parsed = parseLine(bytes.subarray(start, nl), line, path)
    if (Either.isLeft(parsed)) return Either.left(parsed.left)
    entries.push({ entry: parsed.right, line })
    start = nl + 1
    line++
  }
  return Either.right({ entries, tail: start })
}

/** An entry's line, canonical JSON and a newline. */
export const encodeLine = (entry: Line): Buffer => Buffer.from(`${canonicalJson(entry)}\n`, "utf8")

/** The journal of one store root; callers hold the store lock around every call. */
export interface Journal {
  readonly path: string
  /** Reads new lines (recovering a torn tail) and returns the whole state. */
  readonly read: Effect.Effect<State, JournalCorrupt | UnsafePath | StoreIoError>
  /** Appends one activation (fsynced) and returns the new state. Call `read` first under the same lock. */
  readonly append: (entry: Omit<Entry, "v" | "at">) => Effect.Effect<State, JournalCorrupt | UnsafePath | StoreIoError>
  /** Appends one deactivation (fsynced) and returns the new state. Call `read` first under the same lock. */
  readonly appendDeactivation: (
    entry: Omit<Deactivation, "v" | "op" | "at">
  ) => Effect.Effect<State, JournalCorrupt | UnsafePath | StoreIoError>
}

interface Cache {
  dev: bigint
  ino: bigint
  offset: number
  /** Complete lines read so far, of either kind. */
  lines: number
  entries: Array<Indexed>
  newest: Map<string, Indexed>
  deactivated: Map<string, IndexedDeactivation>
}

const emptyCache = (): Cache => ({ dev: -1n, ino: -1n, offset: 0, lines: 0, entries: [], newest: new Map(), deactivated: new Map() })

const stateOf = (cache: Cache): State => ({
  entries: cache.entries.slice(),
  newest: new Map(cache.newest),
  deactivated: new Map(cache.deactivated)
})

const addEntries = (cache: Cache, lines: ReadonlyArray<IndexedLine>) => {
  for (const { entry, line } of lines) {
    const k = key(entry.model, entry.device)
    if (isDeactivation(entry)) {
      cache.deactivated.set(k, { entry, line })
      cache.newest.delete(k)
    } else {
      cache.entries.push({ entry, line })
      cache.newest.set(k, { entry, line })
    }
    cache.lines = line
  }
}

/** An open journal descriptor and the identity it was verified with. */
interface Handle {
  readonly fd: number
  readonly dev: bigint
  readonly ino: bigint
}

/**
 * The journal under `root` (a real, checked directory). One descriptor is kept open for the
 * scope's lifetime and reused while the path still names the same file (checked by lstat on
 * every call, under the lock); a replaced file is reopened and verified again.
 */
export const make = (root: string): Effect.Effect<Journal, never, Scope.Scope> =>
  Effect.gen(function*() {
    const path = Path.join(root, fileName)
    let cache = emptyCache()
    let handle: Handle | undefined
    yield* Effect.addFinalizer(() => handle === undefined ? Effect.void : Fs.closeQuietly(handle.fd))

    /** The open journal, or `None` when absent (and `create` is false). Second value: created now. */
    const ensureOpen = (create: boolean) =>
      Effect.gen(function*() {
        const found = yield* SafePath.lstatIn(root, [], fileName)
        if (Option.isSome(found)) {
          const st = found.value.stat
          if (!st.isFile()) return yield* Effect.fail(new UnsafePath({ path, found: Fs.kindOf(st) }))
          if (handle !== undefined && handle.dev === st.dev && handle.ino === st.ino) {
            return Option.some({ handle, created: false })
          }
        } else if (!create) {
          return Option.none()
        }
        if (handle !== undefined) {
          yield* Fs.closeQuietly(handle.fd)
          handle = undefined
        }
        const flags = Fs.O_RDWR | Fs.O_APPEND | Fs.O_NOFOLLOW | Fs.O_NONBLOCK | (Option.isNone(found) ? Fs.O_CREAT | Fs.O_EXCL : 0)
        const fd = yield* Fs.open(path, flags, 0o600).pipe(
          Fs.catchCodes(["ELOOP"], () => Effect.fail(new UnsafePath({ path, found: "symlink" })))
        )
        const st = yield* SafePath.verifyDescriptor(fd, path, Option.isSome(found) ? found.value.stat : undefined).pipe(
          Effect.onError(() => Fs.closeQuietly(fd))
        )
        handle = { fd, dev: st.dev, ino: st.ino }
        return Option.some({ handle, created: Option.isNone(found) })
      })

    const recover = (fd: number, tailStart: number, tail: Uint8Array) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const aside = yield* Effect.scoped(Effect.gen(function*() {
          const file = yield* SafePath.createExclusive(root, [recoveredDir], `journal.${tailStart}.${now}.${process.pid}.${Crypto.randomBytes(4).toString("hex")}.tail`)
          yield* Fs.writeAll(file.fd, file.path, tail, 0)
          yield* Fs.fsync(file.fd, file.path)
          return file.path
        }))
        yield* Fs.fsyncDir(Path.dirname(aside))
        yield* Fs.ftruncate(fd, path, tailStart)
        yield* Fs.fsync(fd, path)
        yield* Effect.logWarning("journal: torn tail recovered").pipe(
          Effect.annotateLogs({ service: "Store", journal: path, offset: tailStart, bytes: tail.length, keptAt: aside })
        )
      })

    const read = Effect.gen(function*() {
      const opened = yield* ensureOpen(false)
      if (Option.isNone(opened)) {
        cache = emptyCache()
        return stateOf(cache)
      }
      const { fd, dev, ino } = opened.value.handle
      const size = Number((yield* Fs.fstat(fd, path)).size)
      if (dev !== cache.dev || ino !== cache.ino || size < cache.offset) {
        cache = { ...emptyCache(), dev, ino }
      }
      const start = cache.offset
      if (size === start) return stateOf(cache)
      const bytes = Buffer.allocUnsafe(size - start)
      let got = 0
      while (got < bytes.length) {
        const n = yield* Fs.read(fd, path, bytes, got, bytes.length - got, start + got)
        if (n === 0) break
        got += n
      }
      const chunk = bytes.subarray(0, got)
      const parsed = parse(chunk, path, cache.lines + 1)
      if (Either.isLeft(parsed)) {
        cache = emptyCache()
        return yield* Effect.fail(parsed.left)
      }
      addEntries(cache, parsed.right.entries)
      cache.offset = start + parsed.right.tail
      if (parsed.right.tail < chunk.length) {
        yield* recover(fd, cache.offset, chunk.subarray(parsed.right.tail))
      }
      return stateOf(cache)
    }).pipe(Fs.orStoreError)

    const appendLine = (make: (at: string) => Line) =>
      Effect.gen(function*() {
        const entry = make(new Date(yield* Clock.currentTimeMillis).toISOString())
        const line = encodeLine(entry)
        const opened = yield* ensureOpen(true)
        if (Option.isNone(opened)) return yield* Effect.die(new Error("unreachable: journal not created"))
        const { created, handle: { dev, fd, ino } } = opened.value
        if (created) cache = { ...emptyCache(), dev, ino }
        const size = Number((yield* Fs.fstat(fd, path)).size)
        if (size !== cache.offset || dev !== cache.dev || ino !== cache.ino) {
          return yield* Effect.die(new Error("store bug: journal append without a fresh read under the lock"))
        }
        yield* Fs.writeAll(fd, path, line)
        yield* Fs.fsync(fd, path)
        if (created) yield* Fs.fsyncDir(root)
        addEntries(cache, [{ entry, line: cache.lines + 1 }])
        cache.offset += line.length
        return stateOf(cache)
      }).pipe(Fs.orStoreError)

    const append = (fields: Omit<Entry, "v" | "at">) => appendLine((at): Entry => ({ v: 1, ...fields, at }))
    const appendDeactivation = (fields: Omit<Deactivation, "v" | "op" | "at">) =>
      appendLine((at): Deactivation => ({ v: 2, op: "deactivate", ...fields, at }))

    return { path, read, append, appendDeactivation }
  })
