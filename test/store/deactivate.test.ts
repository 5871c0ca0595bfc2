/**
 * Deactivation (`store rm`, issue 17): a journaled deactivation hides a model's activations on a
 * device in every role, so candidates fall back to what was there before; its blobs become
 * collectable (kept while a lease holds them); it can be activated again (the same revision, not
 * an older one); the seed's models are refused; and a torn line after a deactivation is recovered
 * like any other.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Stream from "effect/Stream"
import * as Fs from "node:fs"
import * as Path from "node:path"
import * as Journal from "../../src/services/store/Journal.js"
import * as Seed from "../../src/services/store/Seed.js"
import { bytesOf, envelope, filesUnder, makeKey, makeStore, manifestOf, sha256, tempDir } from "./helpers.js"

const quiet = Logger.withMinimumLogLevel(LogLevel.Error)

/** A store with `base` (revision 1) then `mine` (revisions 1 and 2) active for generation, each with its own blob. */
const prepare = Effect.gen(function*() {
  const root = yield* tempDir
  const key = makeKey()
  const store = yield* makeStore(root, [key])
  const blob = (seed: string) =>
    Effect.gen(function*() {
      const bytes = bytesOf(seed, 4096)
      const digest = sha256(bytes)
      yield* store.stage(Stream.make(bytes), digest, bytes.length)
      return { digest, size: bytes.length }
    })
  const base = yield* blob("base")
  const mine1 = yield* blob("mine-1")
  const mine2 = yield* blob("mine-2")
  yield* store.activate(envelope(key, manifestOf("base", 1, [base])))
  yield* store.activate(envelope(key, manifestOf("mine", 1, [mine1])))
  yield* store.activate(envelope(key, manifestOf("mine", 2, [mine2])))
  return { root, key, store, base, mine1, mine2 }
}).pipe(quiet)

const modelsOf = (candidates: ReadonlyArray<Either.Either<{ readonly model: string; readonly revision: number }, unknown>>) =>
  candidates.flatMap((c) => (Either.isRight(c) ? [`${c.right.model}@${c.right.revision}`] : []))

describe("store deactivation", () => {
  it.scoped("hides every activation of the model on the device; candidates fall back; its blobs become collectable", () =>
    Effect.gen(function*() {
      const { base, key, mine1, mine2, root, store } = yield* prepare
      assert.deepStrictEqual(modelsOf(yield* store.candidates("generation")), ["mine@2", "mine@1", "base@1"])
      const removed = yield* store.deactivate("mine")
      assert.deepStrictEqual(
        { ...removed, manifestDigest: undefined },
        { model: "mine", device: "cpu", revision: 2, manifestDigest: undefined, roles: ["generation"], collectable: [mine2.digest] }
      )
      // Both revisions are hidden (revision 1 was already collectable: reaping keeps only the newest).
      assert.deepStrictEqual(modelsOf(yield* store.candidates("generation")), ["base@1"])
      assert.strictEqual((yield* Effect.flip(store.active({ model: "mine" })))._tag, "NotActive")
      assert.strictEqual((yield* store.active({ role: "generation" })).model, "base")
      const listing = yield* store.list
      assert.deepStrictEqual(listing.active.map((m) => m.model), ["base"])
      assert.deepStrictEqual(listing.blobs.filter((b) => b.referenced).map((b) => b.digest), [base.digest])
      const reaped = yield* store.reap()
      assert.deepStrictEqual([...reaped.removed].sort(), [mine1.digest, mine2.digest].sort())
      // A second removal has nothing to remove.
      const again = yield* Effect.flip(store.deactivate("mine"))
      assert.strictEqual(again._tag, "NotActive")
      assert.strictEqual(again.message, "nothing is active for model:mine on device cpu")
      // Activating it again: the revision removed may come back (journaled anew), an older one is a rollback.
      yield* store.stage(Stream.make(bytesOf("mine-2", 4096)), mine2.digest, mine2.size)
      yield* store.stage(Stream.make(bytesOf("mine-1", 4096)), mine1.digest, mine1.size)
      const rollback = yield* Effect.flip(store.activate(envelope(key, manifestOf("mine", 1, [mine1]))))
      assert.strictEqual(rollback._tag, "RollbackRefused")
      const back = yield* store.activate(envelope(key, manifestOf("mine", 2, [mine2])))
      assert.isFalse(back.alreadyActive)
      assert.deepStrictEqual(modelsOf(yield* store.candidates("generation")), ["mine@2", "base@1"])
      const lines = Fs.readFileSync(Path.join(root, Journal.fileName), "utf8").trim().split("\n")
      assert.strictEqual(lines.length, 5)
      assert.match(lines[3]!, /^\{"at":"[^"]+","device":"cpu","model":"mine","op":"deactivate","revision":2,"v":2\}$/)
    }).pipe(quiet))

  it.scoped("a model active in two roles is hidden in both; another device is untouched", () =>
    Effect.gen(function*() {
      const { base, key, store } = yield* prepare
      yield* store.activate(envelope(key, manifestOf("mine", 3, [base], { role: "decision" })))
      yield* store.activate(envelope(key, manifestOf("mine", 1, [base])), { device: "cuda:0" })
      const removed = yield* store.deactivate("mine")
      assert.deepStrictEqual([...removed.roles].sort(), ["decision", "generation"])
      assert.deepStrictEqual(modelsOf(yield* store.candidates("decision")), [])
      assert.deepStrictEqual(modelsOf(yield* store.candidates("generation", "cuda:0")), ["mine@1"])
      // The blob is still named by `base`: nothing to collect.
      assert.notInclude(removed.collectable, base.digest)
    }).pipe(quiet))

  it.scoped("a leased blob of a removed model is kept by reaping until the lease ends", () =>
    Effect.gen(function*() {
      const { mine2, store } = yield* prepare
      const reaped = yield* Effect.scoped(Effect.gen(function*() {
        yield* store.lease(mine2.digest)
        yield* store.deactivate("mine")
        const listing = yield* store.list
        assert.deepStrictEqual(
          listing.blobs.filter((b) => b.digest === mine2.digest).map((b) => [b.referenced, b.leased]),
          [[false, true]]
        )
        return yield* store.reap()
      }))
      assert.include(reaped.kept, mine2.digest)
      assert.include((yield* store.reap()).removed, mine2.digest)
    }).pipe(quiet))

  it.scoped("the seed's models are refused with an error naming the model", () =>
    Effect.gen(function*() {
      const { store } = yield* prepare
      const seedModel = Path.basename(
        Fs.readdirSync(Seed.packaged.dir).find((f) => f.endsWith(Seed.manifestSuffix))!,
        Seed.manifestSuffix
      )
      const refused = yield* Effect.flip(store.deactivate(seedModel))
      assert.strictEqual(refused._tag, "SeedNotRemovable")
      assert.include(refused.message, `${seedModel} is a model of the packaged seed and cannot be removed`)
    }).pipe(quiet))

  it.scoped("a torn line after a deactivation is set aside; the deactivation holds after reopening", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const root = Path.join(dir, "store")
      const key = makeKey()
      const bytes = bytesOf("torn", 1000)
      const digest = sha256(bytes)
      yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* makeStore(root, [key])
        yield* store.stage(Stream.make(bytes), digest, bytes.length)
        yield* store.activate(envelope(key, manifestOf("mine", 1, [{ digest, size: bytes.length }])))
        yield* store.deactivate("mine")
      }))
      const journalPath = Path.join(root, Journal.fileName)
      const intact = Fs.readFileSync(journalPath)
      // A crash in the middle of the next line: half of another deactivation.
      const torn = Journal.encodeLine({ v: 2, op: "deactivate", model: "other", device: "cpu", revision: 1, at: "x" }).subarray(0, 30)
      Fs.appendFileSync(journalPath, torn)
      const store = yield* makeStore(root, [key])
      assert.isTrue(Fs.readFileSync(journalPath).equals(intact))
      const aside = filesUnder(Path.join(root, Journal.recoveredDir))
      assert.strictEqual(aside.length, 1)
      assert.isTrue(Fs.readFileSync(Path.join(root, Journal.recoveredDir, aside[0]!)).equals(torn))
      assert.strictEqual((yield* Effect.flip(store.active({ model: "mine" })))._tag, "NotActive")
      assert.deepStrictEqual((yield* store.list).active, [])
      // And the journal goes on after the recovered tail.
      yield* store.activate(envelope(key, manifestOf("mine", 1, [{ digest, size: bytes.length }])))
      assert.strictEqual((yield* store.active({ model: "mine" })).journalLine, 3)
    }).pipe(quiet))
})
