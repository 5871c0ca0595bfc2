/**
 * Hostile store contents: bad digest shapes (reliability case 3), symlinks, FIFOs and devices
 * planted in the store (case 7), flipped bytes in a published blob (case 6).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as fc from "effect/FastCheck"
import * as Stream from "effect/Stream"
import * as ChildProcess from "node:child_process"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs"
import * as Path from "node:path"
import * as Digest from "../../src/domain/Digest.js"
import { signingPayload } from "../../src/domain/Manifest.js"
import type { StoreError } from "../../src/services/StoreError.js"
import { bytesOf, envelope, filesUnder, makeKey, makeStore, manifestOf, sha256, tempDir, treeOf } from "./helpers.js"


const hex = "0123456789abcdef".repeat(4)

const badDigests: ReadonlyArray<string> = [
  "sha256:../x",
  `sha256:../../${hex.slice(6)}`,
  `sha256:${hex.slice(1)}`,
  `sha256:${hex}0`,
  `sha256:${hex.toUpperCase()}`,
  `sha256:${hex.slice(0, 63)}A`,
  `sha512:${hex}${hex}`,
  `sha512:${hex}`,
  `SHA256:${hex}`,
  `sha256:${hex.slice(0, 32)}\0${hex.slice(33)}`,
  `sha256:${hex}\0`,
  "",
  "sha256:",
  hex,
  ` sha256:${hex}`,
  `sha256:${hex}\n`,
  `sha256:${hex.slice(0, 62)}/x`,
  `sha256:${hex.slice(0, 63)}g`,
  `sha256:${hex.slice(0, 63)}\u0661`
]

const tagOf = (error: StoreError) => error._tag

describe("digest validation (case 3)", () => {
  it.scoped("every bad digest shape is rejected by stage, verify and lease before any path is built", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const store = yield* makeStore(Path.join(dir, "store"), [])
      const before = treeOf(store.root)
      for (const bad of badDigests) {
        const staged = yield* Effect.flip(store.stage(Stream.make(new Uint8Array([1])), bad, 1))
        const verified = yield* Effect.flip(store.verify(bad))
        const leased = yield* Effect.flip(Effect.scoped(store.lease(bad)))
        assert.deepStrictEqual([tagOf(staged), tagOf(verified), tagOf(leased)], ["InvalidDigest", "InvalidDigest", "InvalidDigest"], JSON.stringify(bad))
      }
      assert.deepStrictEqual(treeOf(store.root), before)
    }))

  it.scoped("a signed manifest naming a bad digest is an invalid manifest", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const key = makeKey()
      const store = yield* makeStore(Path.join(dir, "store"), [key])
      const before = treeOf(store.root)
      for (const bad of badDigests) {
        // Signed over the raw JSON: the signature is valid, the digest is not.
        const manifest = { artifacts: [{ digest: bad, mediaType: "x", size: 1 }], name: "m", revision: 1, role: "generation" }
        const signature = Buffer.from(Crypto.sign(null, signingPayload(manifest), key.privateKey)).toString("base64")
        const error = yield* Effect.flip(store.activate(JSON.stringify({ keyId: key.keyId, manifest, signature })))
        assert.strictEqual(error._tag, "InvalidManifest", JSON.stringify(bad))
      }
      assert.deepStrictEqual(treeOf(store.root), before)
    }))

  it.prop(
    "isDigest agrees with an independent spelling of the rule on random strings and near-misses",
    [
      fc.oneof(
        fc.string({ maxLength: 80 }),
        fc.tuple(fc.stringMatching(/^sha256:[0-9a-f]{64}$/), fc.nat(80), fc.string({ minLength: 1, maxLength: 1 }), fc.nat(2))
          .map(([valid, at, ch, op]) =>
            op === 0
              ? valid.slice(0, at) + ch + valid.slice(at + 1)
              : op === 1
              ? valid.slice(0, at) + ch + valid.slice(at)
              : valid.slice(0, at) + valid.slice(at + 1)
          )
      )
    ],
    ([s]) => {
      const rule = s.length === 71 && s.startsWith("sha256:") && [...s.slice(7)].every((ch) => "0123456789abcdef".includes(ch))
      return Digest.isDigest(s) === rule && Either.isRight(Digest.parse(s)) === rule
    }
  )
})

describe("planted symlinks, FIFOs and devices (case 7)", () => {
  const setup = Effect.gen(function*() {
    const dir = yield* tempDir
    const store = yield* makeStore(Path.join(dir, "store"), [])
    const bytes = bytesOf("victim", 2048)
    const digest = sha256(bytes)
    const outside = Path.join(dir, "outside")
    Fs.mkdirSync(outside)
    Fs.writeFileSync(Path.join(outside, "secret"), bytes)
    return { dir, store, bytes, digest, outside, shard: Digest.hex(digest).slice(0, 2), name: Digest.hex(digest) }
  })

  it.scoped("a symlink in place of blobs/ is refused; nothing outside is read or written", () =>
    Effect.gen(function*() {
      const { bytes, digest, name, outside, shard, store } = yield* setup
      Fs.mkdirSync(Path.join(outside, "sha256", shard), { recursive: true })
      Fs.writeFileSync(Path.join(outside, "sha256", shard, name), bytes)
      Fs.symlinkSync(outside, Path.join(store.root, "blobs"))
      const before = treeOf(outside)
      const results = [
        yield* Effect.flip(store.verify(digest)),
        yield* Effect.flip(Effect.scoped(store.lease(digest))),
        yield* Effect.flip(store.stage(Stream.make(bytes), digest, bytes.length)),
        yield* Effect.flip(store.reap())
      ]
      for (const error of results) {
        assert.deepStrictEqual(error._tag === "UnsafePath" ? [error.path, error.found] : error._tag, [Path.join(store.root, "blobs"), "symlink"])
      }
      assert.deepStrictEqual(treeOf(outside), before)
    }))

  it.scoped("a symlink in place of a shard directory is refused", () =>
    Effect.gen(function*() {
      const { bytes, digest, name, outside, shard, store } = yield* setup
      Fs.mkdirSync(Path.join(store.root, "blobs", "sha256"), { recursive: true })
      Fs.writeFileSync(Path.join(outside, name), bytes)
      Fs.symlinkSync(outside, Path.join(store.root, "blobs", "sha256", shard))
      const before = treeOf(outside)
      const shardPath = Path.join(store.root, "blobs", "sha256", shard)
      for (
        const error of [
          yield* Effect.flip(store.verify(digest)),
          yield* Effect.flip(Effect.scoped(store.lease(digest))),
          yield* Effect.flip(store.stage(Stream.make(bytes), digest, bytes.length)),
          yield* Effect.flip(store.reap())
        ]
      ) {
        assert.deepStrictEqual(error._tag === "UnsafePath" ? [error.path, error.found] : error._tag, [shardPath, "symlink"])
      }
      assert.deepStrictEqual(treeOf(outside), before)
    }))

  it.scoped("a symlink at the final component is refused even when it points at the right bytes", () =>
    Effect.gen(function*() {
      const { bytes, digest, name, outside, shard, store } = yield* setup
      const shardPath = Path.join(store.root, "blobs", "sha256", shard)
      Fs.mkdirSync(shardPath, { recursive: true })
      Fs.symlinkSync(Path.join(outside, "secret"), Path.join(shardPath, name))
      for (
        const error of [
          yield* Effect.flip(store.verify(digest)),
          yield* Effect.flip(Effect.scoped(store.lease(digest))),
          yield* Effect.flip(store.stage(Stream.make(bytes), digest, bytes.length))
        ]
      ) {
        assert.deepStrictEqual(error._tag === "UnsafePath" ? [error.path, error.found] : error._tag, [Path.join(shardPath, name), "symlink"])
      }
      assert.isTrue(Fs.readFileSync(Path.join(outside, "secret")).equals(bytes))
    }))

  it.scoped("a symlink in place of staging/ is refused and nothing is written through it", () =>
    Effect.gen(function*() {
      const { bytes, digest, outside, store } = yield* setup
      Fs.symlinkSync(outside, Path.join(store.root, "staging"))
      const before = treeOf(outside)
      const error = yield* Effect.flip(store.stage(Stream.make(bytes), digest, bytes.length))
      assert.deepStrictEqual(error._tag === "UnsafePath" ? error.found : error._tag, "symlink")
      assert.deepStrictEqual(treeOf(outside), before)
      assert.deepStrictEqual(filesUnder(Path.join(store.root, "blobs")), [])
    }))

  it.scoped("a FIFO or a device where a blob should be is refused without hanging", () =>
    Effect.gen(function*() {
      const { bytes, digest, name, shard, store } = yield* setup
      const shardPath = Path.join(store.root, "blobs", "sha256", shard)
      Fs.mkdirSync(shardPath, { recursive: true })
      ChildProcess.execFileSync("mkfifo", [Path.join(shardPath, name)])
      for (
        const error of [
          yield* Effect.flip(store.verify(digest)),
          yield* Effect.flip(Effect.scoped(store.lease(digest))),
          yield* Effect.flip(store.stage(Stream.make(bytes), digest, bytes.length))
        ]
      ) {
        assert.deepStrictEqual(error._tag === "UnsafePath" ? error.found : error._tag, "fifo")
      }
      Fs.unlinkSync(Path.join(shardPath, name))
      ChildProcess.execFileSync("mknod", [Path.join(shardPath, name), "c", "1", "3"])
      for (
        const error of [
          yield* Effect.flip(store.verify(digest)),
          yield* Effect.flip(Effect.scoped(store.lease(digest)))
        ]
      ) {
        assert.deepStrictEqual(error._tag === "UnsafePath" ? error.found : error._tag, "character device")
      }
    }))

  it.scoped("a symlink at the journal or the lock file is refused when the store opens", () =>
    Effect.gen(function*() {
      const { dir, outside } = yield* setup
      const root = Path.join(dir, "other")
      Fs.mkdirSync(root)
      Fs.symlinkSync(Path.join(outside, "secret"), Path.join(root, "journal.jsonl"))
      const journal = yield* Effect.flip(Effect.scoped(makeStore(root, [])))
      assert.deepStrictEqual(journal._tag === "UnsafePath" ? journal.found : journal._tag, "symlink")
      Fs.unlinkSync(Path.join(root, "journal.jsonl"))
      Fs.rmSync(Path.join(root, "store.lock"), { force: true })
      Fs.symlinkSync(Path.join(outside, "secret"), Path.join(root, "store.lock"))
      const lock = yield* Effect.flip(Effect.scoped(makeStore(root, [])))
      assert.deepStrictEqual(lock._tag === "UnsafePath" ? lock.found : lock._tag, "symlink")
    }))
})

describe("directories replaced while staging (item 9)", () => {
  const setup = Effect.gen(function*() {
    const dir = yield* tempDir
    const store = yield* makeStore(Path.join(dir, "store"), [])
    const bytes = bytesOf("swapped", 300_000)
    const digest = sha256(bytes)
    const outside = Path.join(dir, "outside")
    Fs.mkdirSync(outside)
    const shardPath = Path.join(store.root, "blobs", "sha256", Digest.hex(digest).slice(0, 2))
    return { store, bytes, digest, outside, shardPath, blobPath: Path.join(shardPath, Digest.hex(digest)) }
  })

  /** The bytes as a stream that runs `f` once the copy has begun (after the existence check). */
  const duringCopy = (bytes: Uint8Array, f: () => void) =>
    Stream.make(bytes.subarray(0, 1000), bytes.subarray(1000)).pipe(Stream.tap((chunk) => Effect.sync(() => chunk.length === 1000 && f())))

  it.scoped("a copy refused at publish is kept, and the next stage publishes it without reading a source", () =>
    Effect.gen(function*() {
      const { blobPath, bytes, digest, outside, shardPath, store } = yield* setup
      const planted = duringCopy(bytes, () => {
        Fs.mkdirSync(Path.dirname(shardPath), { recursive: true })
        Fs.symlinkSync(outside, shardPath)
      })
      const error = yield* Effect.flip(store.stage(planted, digest, bytes.length))
      assert.deepStrictEqual(error._tag === "UnsafePath" ? [error.path, error.found] : error._tag, [shardPath, "symlink"])
      assert.deepStrictEqual(treeOf(outside), [])
      assert.strictEqual(filesUnder(Path.join(store.root, "staging")).length, 1, "the verified copy is kept")
      Fs.unlinkSync(shardPath)
      const path = yield* store.stage(Stream.fail(new Error("the source is gone")), digest, bytes.length)
      assert.strictEqual(path, blobPath)
      assert.isTrue(Fs.readFileSync(path).equals(bytes))
      assert.deepStrictEqual(filesUnder(Path.join(store.root, "staging")), [])
      assert.strictEqual((yield* store.verify(digest)).size, bytes.length)
    }))

  it.scoped("staging/ swapped for a symlink mid-copy: the copy still publishes from the directory it was made in", () =>
    Effect.gen(function*() {
      const { blobPath, bytes, digest, outside, store } = yield* setup
      const staging = Path.join(store.root, "staging")
      const swapped = duringCopy(bytes, () => {
        Fs.renameSync(staging, `${staging}.moved`)
        Fs.symlinkSync(outside, staging)
      })
      const path = yield* store.stage(swapped, digest, bytes.length)
      assert.strictEqual(path, blobPath)
      assert.isTrue(Fs.readFileSync(path).equals(bytes))
      assert.deepStrictEqual(treeOf(outside), [])
      assert.deepStrictEqual(treeOf(`${staging}.moved`), [], "the staging name was removed where the copy was made")
    }))
})

describe("flipped bytes (case 6)", () => {
  const flip = (path: string, at: number) => {
    Fs.chmodSync(path, 0o644)
    const fd = Fs.openSync(path, "r+")
    const b = Buffer.alloc(1)
    Fs.readSync(fd, b, 0, 1, at)
    b[0] = b[0]! ^ 0x01
    Fs.writeSync(fd, b, 0, 1, at)
    Fs.closeSync(fd)
    Fs.chmodSync(path, 0o444)
  }

  it.scoped("verify detects one flipped byte and quarantines the blob", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const store = yield* makeStore(Path.join(dir, "store"), [])
      const bytes = bytesOf("flip", 300_000)
      const digest = sha256(bytes)
      const path = yield* store.stage(Stream.make(bytes), digest, bytes.length)
      flip(path, 123_456)
      const error = yield* Effect.flip(store.verify(digest))
      assert.strictEqual(error._tag, "ArtifactCorrupt")
      if (error._tag === "ArtifactCorrupt") {
        assert.strictEqual(Path.dirname(error.quarantined), Path.join(store.root, "quarantine"))
        assert.isTrue(Fs.existsSync(error.quarantined))
      }
      assert.isFalse(Fs.existsSync(path))
      const again = yield* Effect.flip(store.verify(digest))
      assert.strictEqual(again._tag, "ArtifactMissing")
    }))

  it.scoped("a flipped byte is detected on lease and on activation, even after an earlier successful lease", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const key = makeKey()
      const store = yield* makeStore(Path.join(dir, "store"), [key])
      const bytes = bytesOf("flip2", 50_000)
      const digest = sha256(bytes)
      const path = yield* store.stage(Stream.make(bytes), digest, bytes.length)
      yield* Effect.scoped(store.lease(digest))
      flip(path, 0)
      const leased = yield* Effect.flip(Effect.scoped(store.lease(digest)))
      assert.strictEqual(leased._tag, "ArtifactCorrupt")
      yield* store.stage(Stream.make(bytes), digest, bytes.length)
      flip(path, bytes.length - 1)
      const activated = yield* Effect.flip(store.activate(envelope(key, manifestOf("m", 1, [{ digest, size: bytes.length }]))))
      assert.strictEqual(activated._tag, "ArtifactCorrupt")
      const notActive = yield* Effect.exit(store.active({ model: "m" }))
      assert.isTrue(Exit.isFailure(notActive))
    }))
})
