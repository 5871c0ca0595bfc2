/**
 * Manifests and trust (reliability cases 8, 9): unsigned, unknown key, changed byte, another
 * manifest's signature, expiry, rollback, oversized; activation and `active` by model and role.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import * as TestClock from "effect/TestClock"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { canonicalJson, decodeManifest, encodeManifest, signingPayload } from "../../src/domain/Manifest.js"
import { generateKeys } from "../../src/services/Store.js"
import * as Signing from "../../src/services/store/Signing.js"
import { bytesOf, envelope, makeKey, makeStore, manifestOf, sha256, signWith, tempDir } from "./helpers.js"

const setup = Effect.gen(function*() {
  const dir = yield* tempDir
  const key = makeKey()
  const store = yield* makeStore(Path.join(dir, "store"), [key])
  const bytes = bytesOf("model", 10_000)
  const digest = sha256(bytes)
  yield* store.stage(Stream.make(bytes), digest, bytes.length)
  const artifact = { digest, size: bytes.length }
  return { dir, key, store, artifact }
})

const journalLines = (root: string) =>
  Fs.existsSync(Path.join(root, "journal.jsonl"))
    ? Fs.readFileSync(Path.join(root, "journal.jsonl"), "utf8").split("\n").filter((l) => l !== "")
    : []

describe("signed manifests (case 8)", () => {
  it.scoped("a manifest signed by a trusted key activates; active() finds it by model and by role", () =>
    Effect.gen(function*() {
      const { artifact, key, store } = yield* setup
      const activation = yield* store.activate(signWith(key, manifestOf("m", 1, [artifact])))
      assert.deepStrictEqual([activation.model, activation.device, activation.revision, activation.alreadyActive], ["m", "cpu", 1, false])
      const byModel = yield* store.active({ model: "m" })
      const byRole = yield* store.active({ role: "generation" }, "cpu")
      assert.strictEqual(byModel.manifestDigest, activation.manifestDigest)
      assert.strictEqual(byRole.manifestDigest, activation.manifestDigest)
      assert.deepStrictEqual(byModel.artifacts.map((a) => [a.digest, a.size]), [[artifact.digest, artifact.size]])
      assert.isTrue(Fs.existsSync(byModel.artifacts[0]!.path))
      const none = yield* Effect.flip(store.active({ role: "decision" }))
      assert.strictEqual(none._tag, "NotActive")
      const otherDevice = yield* Effect.flip(store.active({ model: "m" }, "cuda:0"))
      assert.strictEqual(otherDevice._tag, "NotActive")
      // The same manifest again is idempotent: nothing appended.
      const again = yield* store.activate(envelope(key, manifestOf("m", 1, [artifact])))
      assert.isTrue(again.alreadyActive)
      assert.strictEqual(journalLines(store.root).length, 1)
    }))

  it.scoped("unsigned, unknown key, one changed byte and another manifest's signature are refused, naming the key", () =>
    Effect.gen(function*() {
      const { artifact, key, store } = yield* setup
      const manifest = manifestOf("m", 1, [artifact])
      const signed = signWith(key, manifest)
      const encoded = encodeManifest(manifest)

      const unsigned = yield* Effect.flip(store.activate(canonicalJson({ manifest: encoded })))
      assert.strictEqual(unsigned._tag, "ManifestUnsigned")
      const noSignature = yield* Effect.flip(store.activate(canonicalJson({ manifest: encoded, keyId: key.keyId })))
      assert.strictEqual(noSignature._tag, "ManifestUnsigned")

      const stranger = makeKey()
      const unknown = yield* Effect.flip(store.activate(envelope(stranger, manifest)))
      assert.deepStrictEqual(unknown._tag === "UnknownKey" ? unknown.keyId : unknown._tag, stranger.keyId)
      assert.include(unknown.message, stranger.keyId)

      const text = Signing.envelopeText(signed)
      const changed = text.replace(`"revision":1`, `"revision":2`)
      assert.notStrictEqual(changed, text)
      const bad = yield* Effect.flip(store.activate(changed))
      assert.deepStrictEqual(bad._tag === "BadSignature" ? bad.keyId : bad._tag, key.keyId)
      assert.include(bad.message, key.keyId)

      // Flip each byte of the signature's decoded form in turn: every one is refused.
      const raw = Buffer.from(signed.signature, "base64")
      for (let i = 0; i < raw.length; i += 7) {
        const flipped = Buffer.from(raw)
        flipped[i] = flipped[i]! ^ 0x80
        const e = yield* Effect.flip(store.activate(text.replace(signed.signature, flipped.toString("base64"))))
        assert.strictEqual(e._tag, "BadSignature")
      }

      const other = signWith(key, manifestOf("other", 1, [artifact]))
      const swapped = canonicalJson({ keyId: key.keyId, manifest: encoded, signature: other.signature })
      const stolen = yield* Effect.flip(store.activate(swapped))
      assert.strictEqual(stolen._tag, "BadSignature")

      const extra = text.replace(`"name":"m"`, `"extra":1,"name":"m"`)
      const extraField = yield* Effect.flip(store.activate(extra))
      assert.strictEqual(extraField._tag, "BadSignature")
      assert.deepStrictEqual(journalLines(store.root), [])
    }))

  it.scoped("an extra field signed along with the manifest is still refused (strict schema)", () =>
    Effect.gen(function*() {
      const { artifact, key, store } = yield* setup
      const encoded = { ...encodeManifest(manifestOf("m", 1, [artifact])), extra: true }
      const signature = Crypto.sign(null, signingPayload(encoded), key.privateKey).toString("base64")
      const error = yield* Effect.flip(store.activate(canonicalJson({ keyId: key.keyId, manifest: encoded, signature })))
      assert.strictEqual(error._tag, "InvalidManifest")
      assert.isTrue(decodeManifest(encoded)._tag === "Left")
    }))

  it.scoped("an expired manifest is refused (clock-driven)", () =>
    Effect.gen(function*() {
      const { artifact, key, store } = yield* setup
      const expiresAt = new Date("2030-01-01T00:00:00.000Z")
      yield* TestClock.setTime(expiresAt.getTime() + 1)
      const error = yield* Effect.flip(store.activate(envelope(key, manifestOf("m", 1, [artifact], { expiresAt }))))
      assert.deepStrictEqual(
        error._tag === "ManifestExpired" ? [error.model, error.expiresAt] : error._tag,
        ["m", "2030-01-01T00:00:00.000Z"]
      )
      yield* TestClock.setTime(expiresAt.getTime() - 1000)
      const ok = yield* store.activate(envelope(key, manifestOf("m", 1, [artifact], { expiresAt })))
      assert.strictEqual(ok.revision, 1)
    }))
})

describe("rollback and size (case 9)", () => {
  it.scoped("an older or equal revision is a rollback error unless explicitly allowed; journal order decides", () =>
    Effect.gen(function*() {
      const { artifact, key, store } = yield* setup
      yield* store.activate(envelope(key, manifestOf("m", 1, [artifact])))
      yield* store.activate(envelope(key, manifestOf("m", 3, [artifact])))
      const replay = yield* Effect.flip(store.activate(envelope(key, manifestOf("m", 1, [artifact]))))
      assert.deepStrictEqual(
        replay._tag === "RollbackRefused" ? [replay.model, replay.device, replay.active, replay.offered] : replay._tag,
        ["m", "cpu", 3, 1]
      )
      const same = yield* Effect.flip(store.activate(envelope(key, manifestOf("m", 3, [artifact], { role: "decision" }))))
      assert.strictEqual(same._tag, "RollbackRefused")
      const rolled = yield* store.activate(envelope(key, manifestOf("m", 2, [artifact])), { allowRollback: true })
      assert.strictEqual(rolled.revision, 2)
      assert.strictEqual((yield* store.active({ model: "m" })).revision, 2)
      // Another device has its own history.
      const other = yield* store.activate(envelope(key, manifestOf("m", 1, [artifact])), { device: "cuda:0" })
      assert.strictEqual(other.device, "cuda:0")
      assert.strictEqual((yield* store.active({ model: "m" })).revision, 2)
    }))

  it.scoped("an oversized manifest is refused before parsing", () =>
    Effect.gen(function*() {
      const { key, store } = yield* setup
      const garbage = "{".repeat(70_000)
      const error = yield* Effect.flip(store.activate(garbage))
      assert.deepStrictEqual(error._tag === "ManifestTooLarge" ? [error.limit, error.size] : error._tag, [65536, 70_000])
      const notJson = yield* Effect.flip(store.activate("{".repeat(100)))
      assert.strictEqual(notJson._tag, "InvalidManifest")
      const many = Array.from({ length: 2000 }, (_, i) => ({ digest: sha256(Buffer.from([i % 256, i >> 8])), size: 1 }))
      const big = yield* Effect.flip(store.activate(envelope(key, manifestOf("m", 1, many))))
      assert.strictEqual(big._tag, "ManifestTooLarge")
    }))

  it.scoped("an artifact that is not staged is ArtifactMissing and nothing is journaled", () =>
    Effect.gen(function*() {
      const { artifact, key, store } = yield* setup
      const missing = sha256(Buffer.from("absent"))
      const error = yield* Effect.flip(store.activate(envelope(key, manifestOf("m", 1, [artifact, { digest: missing, size: 6 }]))))
      assert.deepStrictEqual(error._tag === "ArtifactMissing" ? error.digest : error._tag, missing)
      const wrongSize = yield* Effect.flip(store.activate(envelope(key, manifestOf("m", 1, [{ ...artifact, size: artifact.size + 1 }]))))
      assert.strictEqual(wrongSize._tag, "InvalidManifest")
      assert.deepStrictEqual(journalLines(store.root), [])
    }))
})

describe("keys", () => {
  it.scoped("generateKeys writes a key pair; the key id is a short hash of the public key; files are never overwritten", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const generated = yield* generateKeys(Path.join(dir, "keys"))
      assert.match(generated.keyId, /^ed25519:[0-9a-f]{16}$/)
      assert.strictEqual(Fs.statSync(generated.privateKeyPath).mode & 0o777, 0o600)
      const pub = Signing.publicKeyFromPem(Fs.readFileSync(generated.publicKeyPath, "utf8"))
      assert.deepStrictEqual(pub._tag === "Right" ? pub.right.keyId : pub._tag, generated.keyId)
      const priv = Signing.privateKeyFromPem(Fs.readFileSync(generated.privateKeyPath, "utf8"))
      assert.strictEqual(priv._tag, "Right")
      // A store trusting the generated public key accepts what its private key signs.
      if (priv._tag === "Right") {
        const store = yield* makeStore(Path.join(dir, "store"), [], { trustedKeys: [Fs.readFileSync(generated.publicKeyPath, "utf8")] })
        const bytes = bytesOf("k", 10)
        yield* store.stage(Stream.make(bytes), sha256(bytes), 10)
        const signed = Signing.sign(manifestOf("k", 1, [{ digest: sha256(bytes), size: 10 }]), priv.right)
        assert.strictEqual(signed.keyId, generated.keyId)
        assert.strictEqual((yield* store.activate(signed)).keyId, generated.keyId)
      }
      const bad = yield* Effect.flip(Effect.scoped(makeStore(Path.join(dir, "s2"), [], { trustedKeys: ["not a key"] })))
      assert.strictEqual(bad._tag, "InvalidKey")
    }))
})
