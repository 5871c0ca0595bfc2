/**
 * Trust recovery and the seed's place in a store (issue 12, items 4 to 6): an activation whose
 * signer is no longer trusted is passed over (the role falls back to the newest activation that
 * still verifies, or to the packaged seed), a re-signed seed leaves existing stores usable, the
 * seed's key signs only the seed's own models, and a seed upgrade never replaces the model a
 * user activated for a role.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Stream from "effect/Stream"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { pinnedDigests } from "../../fixtures/models.js"
import { decodeManifest, Manifest } from "../../src/domain/Manifest.js"
import type * as Store from "../../src/services/Store.js"
import * as Seed from "../../src/services/store/Seed.js"
import * as Signing from "../../src/services/store/Signing.js"
import { bytesOf, envelope, makeKey, makeStore, manifestOf, projectRoot, sha256, type TestKey, tempDir } from "./helpers.js"

const packagedSeed = Path.join(projectRoot, "fixtures", "seed")

/**
 * A copy of the packaged seed re-signed with `key` (as `fixtures/sign-seed.ts` does on a machine
 * without the old key), each manifest's revision set to `revision` when given.
 */
const resignedSeed = (dir: string, key: TestKey, revision?: number) => {
  const out = Path.join(dir, `seed-${key.keyId.slice(8)}-${revision ?? "same"}`)
  Fs.mkdirSync(out, { recursive: true })
  Fs.writeFileSync(Path.join(out, Seed.publicKeyFile), key.publicPem)
  for (const name of Fs.readdirSync(packagedSeed).filter((f) => f.endsWith(Seed.manifestSuffix))) {
    const raw = JSON.parse(Fs.readFileSync(Path.join(packagedSeed, name), "utf8")) as { manifest: unknown }
    const decoded = decodeManifest(raw.manifest)
    if (Either.isLeft(decoded)) throw new Error(`packaged seed ${name} does not decode`)
    const manifest = revision === undefined ? decoded.right : new Manifest({ ...decoded.right, revision })
    Fs.writeFileSync(Path.join(out, name), `${Signing.envelopeText(Signing.sign(manifest, key.privateKey))}\n`)
  }
  return out
}

const seeded = (root: string, seedDir: string, keys: ReadonlyArray<TestKey> = []) =>
  makeStore(root, keys, { trustSeedKey: true, seed: { dir: seedDir, materialize: Seed.generate } })

/** A staged artifact of random bytes. */
const artifactIn = (store: Store.Store["Type"], seed: string) =>
  Effect.gen(function*() {
    const bytes = bytesOf(seed, 4096)
    yield* store.stage(Stream.make(bytes), sha256(bytes), bytes.length)
    return { digest: sha256(bytes), size: bytes.length }
  })

const describeCandidates = (candidates: ReadonlyArray<Store.Candidate>) =>
  candidates.map((c) =>
    Either.match(c, {
      onLeft: (p) => `passed over ${p.model} r${p.revision}: ${p.error}`,
      onRight: (m) => `${m.model} r${m.revision}${m.journalLine === undefined ? " (seed)" : ""}`
    })
  )

const quiet = Logger.withMinimumLogLevel(LogLevel.Error)

describe("trust changes (item 4)", () => {
  it.scoped("an activation whose signer is no longer trusted is passed over: the role falls back to the newest one that verifies", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const root = Path.join(dir, "store")
      const kept = makeKey()
      const removed = makeKey()
      yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* makeStore(root, [kept, removed])
        const first = yield* artifactIn(store, "first")
        const second = yield* artifactIn(store, "second")
        yield* store.activate(envelope(kept, manifestOf("first", 1, [first])))
        yield* store.activate(envelope(removed, manifestOf("second", 1, [second])))
        assert.strictEqual((yield* store.active({ role: "generation" })).model, "second")
      }))
      // The same store, started again without the removed key.
      const store = yield* makeStore(root, [kept])
      const active = yield* store.active({ role: "generation" }).pipe(quiet)
      assert.strictEqual(active.model, "first")
      assert.deepStrictEqual(describeCandidates(yield* store.candidates("generation")), [
        "passed over second r1: UnknownKey",
        "first r1"
      ])
      const listing = yield* store.list
      assert.deepStrictEqual(listing.active.map((m) => m.model), ["first"])
      assert.deepStrictEqual(listing.passedOver.map((p) => [p.model, p.error, p.journalLine]), [["second", "UnknownKey", 2]])
      assert.include(listing.passedOver[0]!.reason, removed.keyId)
      // Nothing left that verifies: the typed refusal of the newest activation, naming the key.
      const none = yield* Effect.flip(store.active({ model: "second" }).pipe(quiet))
      assert.strictEqual(none._tag, "UnknownKey")
      // Reaping never collects what a passed-over activation names (its key may come back).
      const reaped = yield* store.reap()
      assert.deepStrictEqual(reaped.removed, [])
    }))

  /** A store that imported a seed signed by one key, and a copy of the seed re-signed by another. */
  const resignedAfterImport = Effect.gen(function*() {
    const dir = yield* tempDir
    const root = Path.join(dir, "store")
    const oldSeed = resignedSeed(dir, makeKey())
    yield* Effect.scoped(Effect.flatMap(seeded(root, oldSeed), (store) => store.importSeed))
    return { root, newSeed: resignedSeed(dir, makeKey()) }
  })

  it.scoped("a re-signed seed leaves a store that activated the old seed usable", () =>
    Effect.gen(function*() {
      const { newSeed, root } = yield* resignedAfterImport
      const store = yield* seeded(root, newSeed)
      const journal = Fs.readFileSync(Path.join(store.root, "journal.jsonl"), "utf8")
      const report = yield* store.importSeed
      assert.isTrue(report.models.every((m) => m.alreadyActive))
      // Same manifests, same digests: nothing journaled, the stored envelopes now verify again.
      assert.strictEqual(Fs.readFileSync(Path.join(store.root, "journal.jsonl"), "utf8"), journal)
      assert.strictEqual((yield* store.active({ role: "generation" })).artifacts[0]!.digest, pinnedDigests["qwen-chat"])
      assert.strictEqual((yield* store.active({ role: "decision" })).artifacts[0]!.digest, pinnedDigests["qwen-decision"])
      assert.deepStrictEqual((yield* store.list).passedOver, [])
    }), { timeout: 30_000 })

  it.scoped("before the re-signed seed is imported, the old seed's activations are passed over for the packaged seed", () =>
    Effect.gen(function*() {
      const { newSeed, root } = yield* resignedAfterImport
      const store = yield* seeded(root, newSeed)
      assert.deepStrictEqual(describeCandidates(yield* store.candidates("generation")), [
        "passed over qwen-chat r1: UnknownKey",
        "qwen-chat r1 (seed)"
      ])
    }), { timeout: 30_000 })

  it.scoped("a seed that cannot be read leaves the journal's candidates (it is a last resort, not a requirement)", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const key = makeKey()
      const store = yield* makeStore(Path.join(dir, "store"), [key], {
        trustSeedKey: true,
        seed: { dir: Path.join(dir, "no-seed-here"), materialize: Seed.generate }
      }).pipe(quiet)
      const artifact = yield* artifactIn(store, "mine")
      yield* store.activate(envelope(key, manifestOf("mine", 1, [artifact])))
      assert.deepStrictEqual(describeCandidates(yield* store.candidates("generation").pipe(quiet)), ["mine r1"])
      assert.strictEqual((yield* Effect.flip(store.importSeed))._tag, "StoreIoError")
    }))
})

describe("the seed key's scope (item 5)", () => {
  it.scoped("the seed's key signs only the seed's own names and roles; a key the configuration names signs anything", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const seedKey = makeKey()
      const seedDir = resignedSeed(dir, seedKey)
      const store = yield* seeded(Path.join(dir, "store"), seedDir)
      const artifact = yield* artifactIn(store, "evil")
      const other = yield* Effect.flip(store.activate(envelope(seedKey, manifestOf("evil", 1, [artifact]))))
      assert.strictEqual(other._tag, "KeyNotAllowed")
      assert.strictEqual(
        other.message,
        `key ${seedKey.keyId} may sign only qwen-chat (generation), qwen-decision (decision); refusing evil (generation)`
      )
      const otherRole = yield* Effect.flip(store.activate(envelope(seedKey, manifestOf("qwen-chat", 2, [artifact], { role: "decision" }))))
      assert.strictEqual(otherRole._tag, "KeyNotAllowed")
      assert.isFalse(Fs.existsSync(Path.join(store.root, "journal.jsonl")))
      // Its own model and role: accepted.
      const own = yield* store.activate(envelope(seedKey, manifestOf("qwen-chat", 2, [artifact])))
      assert.strictEqual(own.model, "qwen-chat")
      // Trusted explicitly, the same key is not limited.
      const explicit = yield* seeded(Path.join(dir, "explicit"), seedDir, [seedKey])
      const staged = yield* artifactIn(explicit, "evil")
      assert.strictEqual((yield* explicit.activate(envelope(seedKey, manifestOf("evil", 1, [staged])))).model, "evil")
    }))
})

describe("seed activation (item 6)", () => {
  it.scoped("a seed upgrade is staged, not activated, where the user activated another model for the role", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const root = Path.join(dir, "store")
      const seedKey = makeKey()
      const user = makeKey()
      yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* seeded(root, resignedSeed(dir, seedKey, 1), [user])
        yield* store.importSeed
        const mine = yield* artifactIn(store, "mine")
        yield* store.activate(envelope(user, manifestOf("mine", 1, [mine])))
      }))
      // The package is upgraded: the seed's revision is bumped.
      const store = yield* seeded(root, resignedSeed(dir, seedKey, 2), [user])
      const journal = Fs.readFileSync(Path.join(root, "journal.jsonl"), "utf8").split("\n").length
      const report = yield* store.importSeed
      assert.deepStrictEqual(report.models.map((m) => [m.model, m.revision, m.alreadyActive]), [["qwen-decision", 2, false]])
      assert.deepStrictEqual(report.staged.map((s) => [s.model, s.revision, s.reason]), [
        ["qwen-chat", 2, "generation has an activation of mine (revision 1, journal line 3)"]
      ])
      assert.strictEqual(Fs.readFileSync(Path.join(root, "journal.jsonl"), "utf8").split("\n").length, journal + 1)
      assert.strictEqual((yield* store.active({ role: "generation" })).model, "mine")
      assert.strictEqual((yield* store.active({ role: "decision" })).revision, 2)
      // Staged and available: the seed's blob verifies, and the seed is the role's last candidate.
      yield* store.verify(pinnedDigests["qwen-chat"])
      assert.deepStrictEqual(describeCandidates(yield* store.candidates("generation")), ["mine r1", "qwen-chat r1", "qwen-chat r2 (seed)"])
      // An explicit activation still takes it.
      const file = Path.join(resignedSeed(dir, seedKey, 2), "qwen-chat.manifest.json")
      assert.strictEqual((yield* store.activate(Fs.readFileSync(file))).revision, 2)
      assert.strictEqual((yield* store.active({ role: "generation" })).model, "qwen-chat")
    }), { timeout: 30_000 })

  it.scoped("a model removed with deactivate no longer holds a seed upgrade back", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const root = Path.join(dir, "store")
      const seedKey = makeKey()
      const user = makeKey()
      yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* seeded(root, resignedSeed(dir, seedKey, 1), [user])
        yield* store.importSeed
        const mine = yield* artifactIn(store, "mine")
        yield* store.activate(envelope(user, manifestOf("mine", 1, [mine])))
        yield* store.deactivate("mine")
      }))
      const store = yield* seeded(root, resignedSeed(dir, seedKey, 2), [user])
      const report = yield* store.importSeed
      assert.deepStrictEqual(report.staged, [])
      assert.deepStrictEqual(report.models.map((m) => [m.model, m.revision, m.alreadyActive]), [["qwen-chat", 2, false], ["qwen-decision", 2, false]])
      assert.deepStrictEqual(describeCandidates(yield* store.candidates("generation")), ["qwen-chat r2", "qwen-chat r1"])
    }).pipe(quiet), { timeout: 30_000 })

  it.scoped("a seed older than the active revision of its model is staged, not a failure", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const root = Path.join(dir, "store")
      const seedKey = makeKey()
      yield* Effect.scoped(Effect.flatMap(seeded(root, resignedSeed(dir, seedKey, 3)), (store) => store.importSeed))
      const store = yield* seeded(root, resignedSeed(dir, seedKey, 2))
      const report = yield* store.importSeed.pipe(quiet)
      assert.deepStrictEqual(report.models, [])
      assert.deepStrictEqual(report.staged.map((s) => [s.model, s.reason]), [
        ["qwen-chat", "refusing rollback of qwen-chat on cpu: active revision 3, offered 2"],
        ["qwen-decision", "refusing rollback of qwen-decision on cpu: active revision 3, offered 2"]
      ])
      assert.strictEqual((yield* store.active({ role: "generation" })).revision, 3)
    }), { timeout: 30_000 })
})
