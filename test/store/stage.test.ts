/**
 * Staging: size and digest enforced while copying (reliability cases 1, 2, 4), idempotent
 * import, progress, random chunkings (property), and bad digest shapes (case 3).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Ref from "effect/Ref"
import * as Stream from "effect/Stream"
import * as fc from "effect/FastCheck"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Path from "node:path"
import type { Progress } from "../../src/services/Store.js"
import { bytesOf, filesUnder, makeStore, sha256, tempDir } from "./helpers.js"

const streamOf = (chunks: ReadonlyArray<Uint8Array>) => Stream.fromIterable(chunks)

/** Splits `bytes` at the given cut points. */
const chunked = (bytes: Buffer, cuts: ReadonlyArray<number>): Array<Uint8Array> => {
  const points = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b)
  const out: Array<Uint8Array> = []
  let last = 0
  for (const p of [...points, bytes.length]) {
    out.push(bytes.subarray(last, p))
    last = p
  }
  return out
}

describe("Store.stage", () => {
  it.scoped("publishes a file under its digest, read-only, and nothing is left in staging", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const store = yield* makeStore(Path.join(dir, "store"), [])
      const bytes = bytesOf("a", 3 * 1024 * 1024 + 17)
      const source = Path.join(dir, "source")
      Fs.writeFileSync(source, bytes)
      const digest = sha256(bytes)
      const published = yield* store.stage(source, digest, bytes.length)
      assert.strictEqual(published, Path.join(store.root, "blobs", "sha256", digest.slice(7, 9), digest.slice(7)))
      assert.deepStrictEqual(Fs.readFileSync(published), bytes)
      assert.strictEqual(Fs.statSync(published).mode & 0o777, 0o444)
      assert.deepStrictEqual(filesUnder(Path.join(store.root, "staging")), [])
      const verified = yield* store.verify(digest)
      assert.strictEqual(verified.size, bytes.length)
    }))

  it.scoped("case 1: a digest mismatch publishes nothing and removes the staging file", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const store = yield* makeStore(Path.join(dir, "store"), [])
      const bytes = bytesOf("b", 5000)
      const wrong = sha256(bytesOf("other", 5000))
      const exit = yield* Effect.exit(store.stage(streamOf([bytes]), wrong, bytes.length))
      assert.isTrue(Exit.isFailure(exit))
      const error = yield* Effect.flip(store.stage(streamOf([bytes]), wrong, bytes.length))
      assert.strictEqual(error._tag, "DigestMismatch")
      if (error._tag === "DigestMismatch") {
        assert.strictEqual(error.expected, wrong)
        assert.strictEqual(error.actual, sha256(bytes))
      }
      assert.deepStrictEqual(filesUnder(Path.join(store.root, "blobs")), [])
      assert.deepStrictEqual(filesUnder(Path.join(store.root, "staging")), [])
    }))

  it.scoped("case 2: N+1 bytes stop at byte N+1 with SizeExceeded; N-1 then EOF is SizeMismatch", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const store = yield* makeStore(Path.join(dir, "store"), [])
      const n = 1000
      const bytes = bytesOf("c", n + 1)
      const digest = sha256(bytes.subarray(0, n))
      // A byte-at-a-time stream that counts how much was pulled: staging stops at the first excess byte.
      const pulled = yield* Ref.make(0)
      const oneByOne = Stream.range(0, n + 1000).pipe(
        Stream.mapEffect((i) => Effect.as(Ref.update(pulled, (k) => k + 1), new Uint8Array([bytes[i % (n + 1)]!])))
      )
      const exceeded = yield* Effect.flip(store.stage(oneByOne, digest, n))
      assert.strictEqual(exceeded._tag, "SizeExceeded")
      if (exceeded._tag === "SizeExceeded") {
        assert.strictEqual(exceeded.declared, n)
        assert.strictEqual(exceeded.received, n + 1)
      }
      assert.strictEqual(yield* Ref.get(pulled), n + 1)
      // From a file: the read is capped at N+1 bytes.
      const big = Path.join(dir, "big")
      Fs.writeFileSync(big, bytesOf("c", 10 * 1024 * 1024))
      const fromFile = yield* Effect.flip(store.stage(big, digest, n))
      assert.deepStrictEqual(fromFile._tag === "SizeExceeded" ? [fromFile.declared, fromFile.received] : fromFile._tag, [n, n + 1])
      const short = yield* Effect.flip(store.stage(streamOf([bytes.subarray(0, n - 1)]), digest, n))
      assert.deepStrictEqual(short._tag === "SizeMismatch" ? [short.declared, short.received] : short._tag, [n, n - 1])
      const invalid = yield* Effect.flip(store.stage(streamOf([]), digest, -1))
      assert.strictEqual(invalid._tag, "InvalidSize")
      assert.deepStrictEqual(filesUnder(Path.join(store.root, "blobs")), [])
      assert.deepStrictEqual(filesUnder(Path.join(store.root, "staging")), [])
    }))

  it.scoped("case 4: staging a present digest is idempotent; the existing file and the source are untouched", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const store = yield* makeStore(Path.join(dir, "store"), [])
      const bytes = bytesOf("d", 100_000)
      const digest = sha256(bytes)
      const path = yield* store.stage(streamOf([bytes]), digest, bytes.length)
      const before = Fs.statSync(path, { bigint: true })
      const pulled = yield* Ref.make(0)
      const counting = streamOf([bytes]).pipe(Stream.tap(() => Ref.update(pulled, (k) => k + 1)))
      const again = yield* store.stage(counting, digest, bytes.length)
      const after = Fs.statSync(path, { bigint: true })
      assert.strictEqual(again, path)
      assert.strictEqual(yield* Ref.get(pulled), 0)
      assert.deepStrictEqual([after.ino, after.mtimeNs, after.ctimeNs], [before.ino, before.mtimeNs, before.ctimeNs])
    }))

  it.scoped("reports progress with bytes, total and rate", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const store = yield* makeStore(Path.join(dir, "store"), [])
      const bytes = bytesOf("e", 3 * 1024 * 1024)
      const source = Path.join(dir, "source")
      Fs.writeFileSync(source, bytes)
      const seen: Array<Progress> = []
      yield* store.stage(source, sha256(bytes), bytes.length, { onProgress: (p) => Effect.sync(() => seen.push(p)) })
      assert.isAtLeast(seen.length, 1)
      const last = seen[seen.length - 1]!
      assert.deepStrictEqual([last.bytes, last.total], [bytes.length, bytes.length])
      for (let i = 1; i < seen.length; i++) assert.isAtLeast(seen[i]!.bytes, seen[i - 1]!.bytes)
      assert.isAtLeast(last.bytesPerSecond, 0)
    }))

  it.scoped("a source that is a FIFO is refused without hanging", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const store = yield* makeStore(Path.join(dir, "store"), [])
      const fifo = Path.join(dir, "fifo")
      ChildProcess.execFileSync("mkfifo", [fifo])
      const error = yield* Effect.flip(store.stage(fifo, sha256(Buffer.alloc(1)), 1))
      assert.deepStrictEqual(error._tag === "UnsafePath" ? error.found : error._tag, "fifo")
    }))

  it.scoped.prop(
    "any chunking and size of a staged stream publishes exactly the bytes, or fails as declared",
    {
      size: fc.integer({ min: 0, max: 40_000 }),
      cuts: fc.array(fc.nat(), { maxLength: 24 }),
      delta: fc.constantFrom(0, 0, 0, 1, -1, 7, -7),
      seed: fc.string({ maxLength: 8 })
    },
    ({ cuts, delta, seed, size }) =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const store = yield* makeStore(Path.join(dir, "store"), [])
        const bytes = bytesOf(seed, size)
        const declared = size + delta
        const digest = sha256(bytes)
        const exit = yield* Effect.exit(store.stage(streamOf(chunked(bytes, cuts)), digest, declared))
        if (delta === 0) {
          assert.isTrue(Exit.isSuccess(exit))
          if (Exit.isSuccess(exit)) assert.isTrue(Fs.readFileSync(exit.value).equals(bytes))
        } else {
          assert.isTrue(Exit.isFailure(exit))
          const tag = Exit.isFailure(exit) ? Chunk.toReadonlyArray(Cause.failures(exit.cause))[0]?._tag : undefined
          assert.strictEqual(tag, declared < 0 ? "InvalidSize" : delta < 0 ? "SizeExceeded" : "SizeMismatch")
          assert.deepStrictEqual(filesUnder(Path.join(store.root, "blobs")), [])
        }
        assert.deepStrictEqual(filesUnder(Path.join(store.root, "staging")), [])
      }),
    { fastCheck: { numRuns: 40 } }
  )
})
