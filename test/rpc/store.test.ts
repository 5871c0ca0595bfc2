/**
 * Store operations over the socket with the typed client and a real store: import with progress
 * (trust, expiry and revision checked before any byte is copied), list, verify, activate, reap,
 * and the store's typed errors arriving as themselves.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import * as Fs from "node:fs"
import * as Path from "node:path"
import type { ImportEvent } from "../../src/rpc/Api.js"
import { DigestMismatch, NotActive, RollbackRefused, SeedNotRemovable, UnknownKey, UnsafePath } from "../../src/services/StoreError.js"
import { bytesOf, envelope, makeKey, manifestOf, sha256 } from "../store/helpers.js"
import { connect, serve } from "./support/serve.js"

const key = makeKey()

/** A model file of `size` bytes in `dir` and the signed manifest naming it. */
const modelFile = (dir: string, name: string, revision: number, size: number, signer = key) => {
  const bytes = bytesOf(`${name}-${revision}`, size)
  const path = Path.join(dir, `${name}-${revision}.gguf`)
  Fs.writeFileSync(path, bytes)
  const digest = sha256(bytes)
  return { path, digest, size, manifest: envelope(signer, manifestOf(name, revision, [{ digest, size }])) }
}

const collect = <A, E, R>(stream: Stream.Stream<A, E, R>) => Effect.map(Stream.runCollect(stream), Chunk.toArray)

const tags = (events: ReadonlyArray<ImportEvent>) => [...new Set(events.map((e) => e._tag))]

describe("store over RPC", () => {
  it.scoped("import streams Verified, Progress up to the total, Staged, Activated; then list and verify show it", () =>
    Effect.gen(function*() {
      const { dir, socketPath } = yield* serve({}, [key])
      const { store } = yield* connect(socketPath)
      const model = modelFile(dir, "m", 1, 9 * 1024 * 1024 + 5)
      const events = yield* collect(store.import({ manifest: model.manifest, path: model.path }))
      assert.deepStrictEqual(tags(events), ["Verified", "Progress", "Staged", "Activated"])
      assert.deepStrictEqual(events[0], { _tag: "Verified", model: "m", role: "generation", revision: 1 })
      const progress = events.filter((e) => e._tag === "Progress")
      assert.isTrue(progress.every((p, i) => p.digest === model.digest && p.total === model.size && (i === 0 || p.bytes >= progress[i - 1]!.bytes)))
      assert.strictEqual(progress.at(-1)?.bytes, model.size)
      const last = events.at(-1)
      assert.strictEqual(last?._tag, "Activated")
      if (last?._tag === "Activated") {
        assert.strictEqual(last.activation.model, "m")
        assert.strictEqual(last.activation.revision, 1)
        assert.strictEqual(last.activation.keyId, key.keyId)
        assert.isFalse(last.activation.alreadyActive)
      }
      const listing = yield* store.list
      assert.deepStrictEqual(listing.active.map((a) => [a.model, a.revision, a.artifacts[0]?.digest]), [["m", 1, model.digest]])
      assert.strictEqual(listing.active[0]?.manifest.artifacts[0]?.size, model.size)
      assert.deepStrictEqual(listing.blobs.map((b) => [b.digest, b.referenced]), [[model.digest, true]])
      const verified = yield* store.verify(model.digest)
      assert.strictEqual(verified.size, model.size)
      assert.deepStrictEqual(Fs.readFileSync(verified.path), Fs.readFileSync(model.path))
      // Again: nothing to copy, already active.
      const again = yield* collect(store.import({ manifest: model.manifest, path: model.path }))
      assert.deepStrictEqual(tags(again), ["Verified", "Activated"])
      assert.isTrue(again[1]?._tag === "Activated" && again[1].activation.alreadyActive)
    }))

  it.scoped("an untrusted manifest is refused before any byte is copied", () =>
    Effect.gen(function*() {
      const { dir, socketPath } = yield* serve({}, [key])
      const { store } = yield* connect(socketPath)
      const model = modelFile(dir, "m", 1, 1024, makeKey())
      const seen: Array<ImportEvent> = []
      const error = yield* Effect.flip(Stream.runForEach(store.import({ manifest: model.manifest, path: model.path }), (e) => Effect.sync(() => seen.push(e))))
      assert.instanceOf(error, UnknownKey)
      assert.deepStrictEqual(seen, [])
      assert.deepStrictEqual((yield* store.list).blobs, [])
    }))

  it.scoped("an older revision is refused before copying; with allowRollback it is imported", () =>
    Effect.gen(function*() {
      const { dir, socketPath } = yield* serve({}, [key])
      const { store } = yield* connect(socketPath)
      const newer = modelFile(dir, "m", 2, 2048)
      const older = modelFile(dir, "m", 1, 1024)
      yield* collect(store.import({ manifest: newer.manifest, path: newer.path }))
      const error = yield* Effect.flip(collect(store.import({ manifest: older.manifest, path: older.path })))
      assert.instanceOf(error, RollbackRefused)
      assert.deepStrictEqual([error.active, error.offered], [2, 1])
      assert.deepStrictEqual((yield* store.list).blobs.map((b) => b.digest), [newer.digest])
      const events = yield* collect(store.import({ manifest: older.manifest, path: older.path, allowRollback: true }))
      assert.strictEqual(events.at(-1)?._tag, "Activated")
    }))

  it.scoped("bytes that do not match the manifest fail with DigestMismatch and nothing is activated", () =>
    Effect.gen(function*() {
      const { dir, socketPath } = yield* serve({}, [key])
      const { store } = yield* connect(socketPath)
      const model = modelFile(dir, "m", 1, 4096)
      Fs.writeFileSync(model.path, bytesOf("something else", 4096))
      const error = yield* Effect.flip(collect(store.import({ manifest: model.manifest, path: model.path })))
      assert.instanceOf(error, DigestMismatch)
      assert.strictEqual(error.expected, model.digest)
      assert.deepStrictEqual(yield* store.list, { active: [], passedOver: [], blobs: [] })
    }))

  it.scoped("a relative path is refused", () =>
    Effect.gen(function*() {
      const { dir, socketPath } = yield* serve({}, [key])
      const { store } = yield* connect(socketPath)
      const model = modelFile(dir, "m", 1, 16)
      const error = yield* Effect.flip(collect(store.import({ manifest: model.manifest, path: Path.relative(process.cwd(), model.path) })))
      assert.instanceOf(error, UnsafePath)
      assert.include(error.found, "relative")
    }))

  it.scoped("activate and reap: a replaced revision's blob is reaped, the active one kept", () =>
    Effect.gen(function*() {
      const { dir, socketPath } = yield* serve({}, [key])
      const { store } = yield* connect(socketPath)
      const first = modelFile(dir, "m", 1, 1000)
      const second = modelFile(dir, "m", 2, 2000)
      yield* collect(store.import({ manifest: first.manifest, path: first.path }))
      yield* collect(store.import({ manifest: second.manifest, path: second.path }))
      // Activating what is active appends nothing.
      const activation = yield* store.activate(second.manifest)
      assert.isTrue(activation.alreadyActive)
      const report = yield* store.reap({ grace: 0 })
      assert.deepStrictEqual(report.removed, [first.digest])
      assert.strictEqual(report.freedBytes, 1000)
      assert.deepStrictEqual((yield* store.list).blobs.map((b) => b.digest), [second.digest])
      assert.strictEqual((yield* Effect.flip(store.verify(first.digest)))._tag, "ArtifactMissing")
      assert.strictEqual((yield* Effect.flip(store.verify("sha256:nope")))._tag, "InvalidDigest")
    }))

  it.scoped("deactivate: the model leaves the listing, its blob is reaped; the seed's models are refused as themselves", () =>
    Effect.gen(function*() {
      const { dir, socketPath } = yield* serve({}, [key])
      const { store } = yield* connect(socketPath)
      const model = modelFile(dir, "m", 1, 1000)
      yield* collect(store.import({ manifest: model.manifest, path: model.path }))
      const removed = yield* store.deactivate("m")
      assert.deepStrictEqual([removed.model, removed.device, removed.revision, removed.roles, removed.collectable], ["m", "cpu", 1, ["generation"], [model.digest]])
      assert.deepStrictEqual((yield* store.list).active, [])
      assert.deepStrictEqual((yield* store.reap({ grace: 0 })).removed, [model.digest])
      assert.instanceOf(yield* Effect.flip(store.deactivate("m")), NotActive)
      const seed = yield* Effect.flip(store.deactivate("qwen-chat"))
      assert.instanceOf(seed, SeedNotRemovable)
      assert.strictEqual(seed.model, "qwen-chat")
    }))
})
