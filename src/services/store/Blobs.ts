/**
 * Content-addressed blobs under `<root>/blobs/sha256/<2 hex>/<64 hex>`, read-only once
 * published. Staging copies into `<root>/staging/<owner>.<random>.partial` (O_EXCL), enforcing
 * the declared size while copying and hashing as it goes; then it checks size and digest, makes
 * the file read-only, fsyncs it, hard-links it into place (so of two concurrent stagers exactly
 * one publishes), removes the staging name and fsyncs the shard directory. Every step works
 * relative to open, checked directories (`Dir`), so a directory swapped for a symlink meanwhile
 * cannot send a copy, link, rename or unlink outside the root. A verified copy whose publishing is
 * refused is kept as `staging/<owner>.<64 hex>.ready`; the next stage of that digest by this
 * process hashes it again and publishes it instead of copying anew (a dead owner's copy is removed
 * like any staging file). Verification re-hashes and moves a corrupt blob to `<root>/quarantine/`.
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import * as Crypto from "node:crypto"
import type { BigIntStats } from "node:fs"
import * as Path from "node:path"
import * as Digest from "../../domain/Digest.js"
import type * as StoreResults from "../../domain/StoreResults.js"
import {
  ArtifactCorrupt,
  ArtifactMissing,
  DigestMismatch,
  InvalidDigest,
  InvalidSize,
  SizeExceeded,
  SizeMismatch,
  type StoreIoError,
  UnsafePath
} from "../StoreError.js"
import * as Dir from "./Dir.js"
import * as Fs from "./Fs.js"
import type { FileLock } from "./Lock.js"
import * as Owner from "./Owner.js"
import * as SafePath from "./SafePath.js"

/** Progress of a staging copy. */
export interface Progress {
  /** Bytes copied so far. */
  readonly bytes: number
  /** The declared size. */
  readonly total: number
  /** Average rate since the copy began (0 until time has passed). */
  readonly bytesPerSecond: number
}

/** A file path, or a stream of byte chunks. */
export type StageSource<E = never> = string | Stream.Stream<Uint8Array, E>

/** A blob that hashed to its digest (the domain's `VerifiedBlob`), with the identity it had when hashed. */
export type VerifiedBlob = StoreResults.VerifiedBlob & {
  readonly dev: bigint
  readonly ino: bigint
}

export const stagingDir = "staging"
export const quarantineDir = "quarantine"
/**
 * 1 MiB: a chunk stays in the core's cache between the copy in (read), the copy out (write) and
 * the hash. Measured with 4 MiB chunks the kernel's copy time doubled to quadrupled (docs/decisions.md).
 */
const chunkSize = 1 << 20
const progressEveryMillis = 100

/** Validates an untrusted digest before it can become part of any path. */
export const validateDigest = (value: unknown): Effect.Effect<Digest.Digest, InvalidDigest> =>
  Digest.isDigest(value)
    ? Effect.succeed(value)
    : Effect.fail(
      new InvalidDigest({
        value: (() => {
          const s = typeof value === "string" ? JSON.stringify(value) : String(value)
          return s.length > 100 ? `${s.slice(0, 97)}...` : s
        })(),
        reason: Digest.describe(value)
      })
    )

/** The directory segments of a blob below the root. */
export const segmentsOf = (digest: Digest.Digest): ReadonlyArray<string> => ["blobs", "sha256", Digest.hex(digest).slice(0, 2)]

const identityKey = (st: BigIntStats) => `${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`

export interface Blobs {
  /** Where a blob lives (whether or not it is present). */
  readonly pathOf: (digest: Digest.Digest) => string
  readonly stage: <E>(
    source: StageSource<E>,
    expected: Digest.Digest,
    declaredSize: number,
    onProgress?: (progress: Progress) => Effect.Effect<void>
  ) => Effect.Effect<string, E | DigestMismatch | SizeExceeded | SizeMismatch | InvalidSize | UnsafePath | ArtifactCorrupt | StoreIoError>
  /**
   * Re-hashes a blob; a mismatch quarantines it. With `trustIdentity`, a blob this process has
   * already hashed (or published) and whose dev/inode/size/mtime/ctime are unchanged is not
   * hashed again: any write to it changes ctime.
   */
  readonly verify: (
    digest: Digest.Digest,
    options?: { readonly trustIdentity?: boolean }
  ) => Effect.Effect<VerifiedBlob, ArtifactMissing | ArtifactCorrupt | UnsafePath | StoreIoError>
  /** lstat of a blob through checked directories; `None` when absent. */
  readonly statOf: (digest: Digest.Digest) => Effect.Effect<Option.Option<BigIntStats>, UnsafePath | StoreIoError>
  /** Every published blob (regular files with a digest name). */
  readonly list: Effect.Effect<ReadonlyArray<{ readonly digest: Digest.Digest; readonly stat: BigIntStats }>, UnsafePath | StoreIoError>
  /** Removes a blob if it still has the given identity. Call under the store lock. */
  readonly remove: (digest: Digest.Digest, ino: bigint) => Effect.Effect<boolean, UnsafePath | StoreIoError>
  /** Removes staging files whose owning process is gone; returns how many. */
  readonly cleanStaging: Effect.Effect<number, UnsafePath | StoreIoError>
}

/** Reads `fd` from offset 0 to EOF into a sha256 hash; returns the hex digest and byte count. */
export const hashDescriptor = (fd: number, path: string) =>
  Effect.gen(function*() {
    const hash = Crypto.createHash("sha256")
    const buffer = Buffer.allocUnsafe(chunkSize)
    let position = 0
    for (;;) {
      const n = yield* Fs.read(fd, path, buffer, 0, buffer.length, position)
      if (n === 0) break
      hash.update(buffer.subarray(0, n))
      position += n
    }
    return { hex: hash.digest("hex"), size: position }
  })

/**
 * Feeds a source file to `consume` in 1 MiB chunks, at most `limit` bytes in all, with two
 * reused buffers: the next chunk is read while the current one is consumed (hashed and written).
 */
const copyFile = <E>(path: string, limit: number, consume: (chunk: Uint8Array) => Effect.Effect<void, E>) =>
  Effect.scoped(Effect.gen(function*() {
    const file = yield* SafePath.openSource(path)
    const buffers = [Buffer.allocUnsafe(chunkSize), Buffer.allocUnsafe(chunkSize)] as const
    let position = 0
    const readInto = (buffer: Buffer) => {
      const want = Math.min(buffer.length, limit - position)
      return want <= 0 ? Effect.succeed(0) : Fs.read(file.fd, file.path, buffer, 0, want, position)
    }
    let current = 0
    let n = yield* readInto(buffers[0])
    position += n
    while (n > 0) {
      const chunk = buffers[current]!.subarray(0, n)
      const [next] = yield* Effect.all([readInto(buffers[1 - current]!), consume(chunk)], { concurrency: 2 })
      position += next
      n = next
      current = 1 - current
    }
  }))

export const make = (root: string, lock: FileLock): Blobs => {
  const owner = Owner.format(Owner.self())
  const verified = new Map<string, string>()

  const pathOf = (digest: Digest.Digest) => Path.join(root, ...segmentsOf(digest), Digest.hex(digest))
  const readyName = (digest: Digest.Digest) => `${owner}.${Digest.hex(digest)}.ready`
  const partialName = (digest: Digest.Digest) =>
    `${owner}.${Crypto.randomBytes(6).toString("hex")}.${Digest.hex(digest).slice(0, 16)}.partial`

  const statOf = (digest: Digest.Digest) =>
    SafePath.lstatIn(root, segmentsOf(digest), Digest.hex(digest)).pipe(
      Effect.map(Option.map((found) => found.stat)),
      Fs.orStoreError
    )

  const quarantine = (digest: Digest.Digest, hashed: BigIntStats) =>
    lock.withLock(Effect.scoped(Effect.gen(function*() {
      const name = Digest.hex(digest)
      verified.delete(name)
      const now = yield* Clock.currentTimeMillis
      const shard = yield* Dir.openExisting(root, segmentsOf(digest))
      const current = Option.isSome(shard) ? yield* Dir.find(shard.value, name) : Option.none<BigIntStats>()
      if (Option.isNone(shard) || Option.isNone(current) || current.value.ino !== hashed.ino || current.value.dev !== hashed.dev) {
        return "(already moved by another process)"
      }
      const dir = yield* Dir.open(root, [quarantineDir], true)
      const target = `${name}.${now}.${owner}`
      yield* Dir.rename(shard.value, name, dir, target)
      yield* Dir.fsync(dir)
      yield* Dir.fsync(shard.value)
      return Path.join(dir.path, target)
    }))).pipe(Fs.orStoreError)

  const verify = (digest: Digest.Digest, options?: { readonly trustIdentity?: boolean }) =>
    Effect.scoped(Effect.gen(function*() {
      const file = yield* SafePath.openRead(root, segmentsOf(digest), Digest.hex(digest)).pipe(
        Fs.catchCodes(["ENOENT", "ENOTDIR"], () => Effect.fail(new ArtifactMissing({ digest })))
      )
      const result: VerifiedBlob = { digest, path: file.path, size: Number(file.stat.size), dev: file.stat.dev, ino: file.stat.ino }
      const identity = identityKey(file.stat)
      if (options?.trustIdentity === true && verified.get(Digest.hex(digest)) === identity) return result
      const { hex } = yield* hashDescriptor(file.fd, file.path)
      if (hex !== Digest.hex(digest)) {
        const quarantined = yield* quarantine(digest, file.stat)
        return yield* Effect.fail(new ArtifactCorrupt({ digest, actual: `sha256:${hex}`, quarantined }))
      }
      const after = yield* Fs.fstat(file.fd, file.path)
      if (identityKey(after) === identity) verified.set(Digest.hex(digest), identity)
      return result
    })).pipe(Fs.orStoreError)

  /** A verified copy in the staging directory, by name, with the identity it was written with. */
  interface Staged {
    readonly name: string
    readonly stat: BigIntStats
  }

  const copy = <E>(
    staging: Dir.Dir,
    source: StageSource<E>,
    expected: Digest.Digest,
    declared: number,
    onProgress: ((progress: Progress) => Effect.Effect<void>) | undefined
  ) =>
    Effect.scoped(Effect.gen(function*() {
      const staged = yield* Effect.acquireRelease(
        Dir.openFile(staging, partialName(expected), Fs.O_WRONLY | Fs.O_CREAT | Fs.O_EXCL, 0o600),
        (file, exit) => exit._tag === "Success" ? Effect.void : Effect.ignore(Dir.unlink(staging, file.name))
      )
      const hash = Crypto.createHash("sha256")
      const started = yield* Clock.currentTimeMillis
      let received = 0
      let reported = started
      const report = (force: boolean) =>
        onProgress === undefined
          ? Effect.void
          : Effect.flatMap(Clock.currentTimeMillis, (now) => {
            if (!force && now - reported < progressEveryMillis) return Effect.void
            reported = now
            const elapsed = (now - started) / 1000
            return onProgress({ bytes: received, total: declared, bytesPerSecond: elapsed > 0 ? received / elapsed : 0 })
          })
      const consume = (chunk: Uint8Array): Effect.Effect<void, SizeExceeded | Fs.FsError> => {
        if (received + chunk.length > declared) {
          return Effect.fail(new SizeExceeded({ digest: expected, declared, received: received + chunk.length }))
        }
        const position = received
        received += chunk.length
        return Effect.all([
          Fs.writeAll(staged.fd, staged.path, chunk, position),
          Effect.sync(() => hash.update(chunk))
        ], { concurrency: 2, discard: true }).pipe(Effect.zipRight(report(false)))
      }
      yield* typeof source === "string" ? copyFile(source, declared + 1, consume) : Stream.runForEach(source, consume)
      if (received !== declared) return yield* Effect.fail(new SizeMismatch({ digest: expected, declared, received }))
      const actual = `sha256:${hash.digest("hex")}`
      if (actual !== expected) return yield* Effect.fail(new DigestMismatch({ expected, actual }))
      yield* report(true)
      yield* Fs.fchmod(staged.fd, staged.path, 0o444)
      yield* Fs.fsync(staged.fd, staged.path)
      return { name: staged.name, stat: staged.stat } satisfies Staged
    }))

  /**
   * Takes this process's kept copy of `expected` (renamed to a fresh name first, so two stagers
   * never take the same one) and hashes it again; `None` when there is none or it does not verify
   * (then it is removed).
   */
  const reuseKept = (staging: Dir.Dir, expected: Digest.Digest, declared: number) =>
    Effect.gen(function*() {
      const name = partialName(expected)
      const taken = yield* Dir.rename(staging, readyName(expected), staging, name).pipe(
        Effect.as(true),
        Fs.catchCodes(["ENOENT"], () => Effect.succeed(false))
      )
      if (!taken) return Option.none<Staged>()
      const checked = yield* Effect.scoped(Effect.gen(function*() {
        const file = yield* Dir.openFile(staging, name, Fs.O_RDONLY | Fs.O_NONBLOCK)
        if (Number(file.stat.size) !== declared) return Option.none<Staged>()
        const { hex } = yield* hashDescriptor(file.fd, file.path)
        return hex === Digest.hex(expected) ? Option.some<Staged>({ name, stat: file.stat }) : Option.none<Staged>()
      })).pipe(Effect.orElseSucceed(() => Option.none<Staged>()))
      if (Option.isNone(checked)) yield* Effect.ignore(Dir.unlink(staging, name))
      return checked
    })

  /** Keeps a verified copy whose publishing failed, for the next stage of its digest. */
  const keep = (staging: Dir.Dir, staged: Staged, expected: Digest.Digest) =>
    Dir.rename(staging, staged.name, staging, readyName(expected)).pipe(
      Effect.zipRight(
        Effect.logWarning("store: publishing failed; the verified copy is kept for the next attempt").pipe(
          Effect.annotateLogs({ service: "Store", digest: expected, kept: Path.join(staging.path, readyName(expected)) })
        )
      ),
      Effect.catchAll(() => Effect.ignore(Dir.unlink(staging, staged.name)))
    )

  const publish = (rootDir: Dir.Dir, staging: Dir.Dir, staged: Staged, expected: Digest.Digest, declared: number) =>
    Effect.scoped(Effect.gen(function*() {
      const shard = yield* Dir.descend(rootDir, segmentsOf(expected), true)
      const name = Digest.hex(expected)
      // link, not rename: of two concurrent stagers exactly one publishes. A blob found present is
      // checked; one that a concurrent reap removed meanwhile is linked again.
      for (let attempt = 0;; attempt++) {
        const linked = yield* Dir.link(staging, staged.name, shard, name).pipe(
          Effect.as(true),
          Fs.catchCodes(["EEXIST"], () => Effect.succeed(false))
        )
        if (linked) break
        const st = yield* Dir.find(shard, name)
        if (Option.isNone(st) && attempt < 3) continue
        if (Option.isSome(st) && st.value.isFile() && Number(st.value.size) === declared) break
        return yield* Effect.fail(
          new UnsafePath({
            path: Path.join(shard.path, name),
            found: Option.isSome(st) ? `${Fs.kindOf(st.value)} of ${st.value.size} bytes where a blob was published` : "vanishing blob"
          })
        )
      }
      yield* Dir.unlink(staging, staged.name)
      yield* Dir.fsync(shard)
      // Only our own copy counts as hashed: a blob another stager published is hashed when used.
      const st = yield* Dir.find(shard, name)
      if (Option.isSome(st) && st.value.isFile() && st.value.dev === staged.stat.dev && st.value.ino === staged.stat.ino) {
        verified.set(name, identityKey(st.value))
      }
      return Path.join(shard.path, name)
    }))

  const stage = <E>(
    source: StageSource<E>,
    expected: Digest.Digest,
    declared: number,
    onProgress?: (progress: Progress) => Effect.Effect<void>
  ) =>
    Effect.scoped(Effect.gen(function*() {
      if (!Number.isSafeInteger(declared) || declared < 0) {
        return yield* Effect.fail(new InvalidSize({ digest: expected, declared }))
      }
      const rootDir = yield* Dir.openRoot(root)
      const existing = yield* Effect.scoped(Effect.gen(function*() {
        const shard = yield* Dir.descend(rootDir, segmentsOf(expected), false)
        return Option.map(yield* Dir.find(shard, Digest.hex(expected)), (stat) => ({ path: Path.join(shard.path, Digest.hex(expected)), stat }))
      })).pipe(Fs.catchCodes(["ENOENT"], () => Effect.succeed(Option.none<{ path: string; stat: BigIntStats }>())))
      if (Option.isSome(existing)) {
        const st = existing.value.stat
        if (!st.isFile()) return yield* Effect.fail(new UnsafePath({ path: existing.value.path, found: Fs.kindOf(st) }))
        if (Number(st.size) === declared) return existing.value.path
        const quarantined = yield* quarantine(expected, st)
        yield* Effect.logWarning("store: published blob had the wrong size; quarantined").pipe(
          Effect.annotateLogs({ service: "Store", digest: expected, size: Number(st.size), declared, quarantined })
        )
      }
      const staging = yield* Dir.child(rootDir, stagingDir, true)
      const kept = yield* reuseKept(staging, expected, declared)
      if (Option.isSome(kept) && onProgress !== undefined) yield* onProgress({ bytes: declared, total: declared, bytesPerSecond: 0 })
      const staged = Option.isSome(kept) ? kept.value : yield* copy(staging, source, expected, declared, onProgress)
      return yield* publish(rootDir, staging, staged, expected, declared).pipe(
        Effect.onError(() => keep(staging, staged, expected))
      )
    })).pipe(Fs.orStoreError)

  const list = Effect.scoped(Effect.gen(function*() {
    const base = yield* Dir.openExisting(root, ["blobs", "sha256"])
    if (Option.isNone(base)) return []
    const out: Array<{ digest: Digest.Digest; stat: BigIntStats }> = []
    for (const shardName of (yield* Dir.readdir(base.value)).sort()) {
      if (!/^[0-9a-f]{2}$/.test(shardName)) continue
      yield* Effect.scoped(Effect.gen(function*() {
        const shard = yield* Dir.child(base.value, shardName, false)
        for (const name of (yield* Dir.readdir(shard)).sort()) {
          const digest = `sha256:${name}`
          if (!name.startsWith(shardName) || !Digest.isDigest(digest)) continue
          const st = yield* Dir.find(shard, name)
          if (Option.isSome(st) && st.value.isFile()) out.push({ digest, stat: st.value })
        }
      }))
    }
    return out
  })).pipe(Fs.orStoreError)

  const remove = (digest: Digest.Digest, ino: bigint) =>
    Effect.scoped(Effect.gen(function*() {
      const name = Digest.hex(digest)
      const shard = yield* Dir.openExisting(root, segmentsOf(digest))
      if (Option.isNone(shard)) return false
      const found = yield* Dir.find(shard.value, name)
      if (Option.isNone(found) || found.value.ino !== ino || !found.value.isFile()) return false
      yield* Dir.unlink(shard.value, name)
      yield* Dir.fsync(shard.value)
      verified.delete(name)
      return true
    })).pipe(Fs.orStoreError)

  const cleanStaging = Effect.scoped(Effect.gen(function*() {
    const dir = yield* Dir.openExisting(root, [stagingDir])
    if (Option.isNone(dir)) return 0
    let removed = 0
    for (const name of yield* Dir.readdir(dir.value)) {
      const who = Owner.parse(name)
      if (who !== undefined && Owner.isAlive(who)) continue
      const st = yield* Dir.find(dir.value, name)
      if (Option.isNone(st) || st.value.isDirectory()) continue
      yield* Dir.unlink(dir.value, name).pipe(Fs.catchCodes(["ENOENT"], () => Effect.void))
      removed++
    }
    return removed
  })).pipe(Fs.orStoreError)

  return { pathOf, stage, verify, statOf, list, remove, cleanStaging }
}
