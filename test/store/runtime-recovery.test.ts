/**
 * Recovery when the store-backed runtime starts (issue 12, items 4 and 7), with real engine
 * children: a signed model whose header is valid but which llama.cpp refuses (an architecture it
 * does not know, `llamz`) and an activation whose signer is no longer trusted are passed over, the role
 * runs the newest activation that loads, and readiness lists what happened; when nothing of a
 * role loads, the start fails naming every reason.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Stream from "effect/Stream"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { ensureModel } from "../../fixtures/models.js"
import { Artifact, ggufMediaType, Manifest, type Role } from "../../src/domain/Manifest.js"
import * as Runtime from "../../src/layers/Runtime.js"
import { Provider } from "../../src/services/Provider.js"
import * as Store from "../../src/services/Store.js"
import * as Seed from "../../src/services/store/Seed.js"
import { testChild, testRunEnv } from "../support/engine.js"
import { envelope, makeKey, makeStore, sha256, type TestKey, tempDir } from "./helpers.js"

/** The tiny model with `general.architecture` renamed: a valid GGUF header llama.cpp refuses to load. */
const unknownArchitecture = (dir: string) => {
  const bytes = Buffer.from(Fs.readFileSync(ensureModel("tiny")))
  const key = Buffer.from("general.architecture", "utf8")
  const value = bytes.indexOf(key) + key.length + 4 + 8
  assert.strictEqual(bytes.subarray(value, value + 5).toString("latin1"), "llama")
  bytes.write("llamz", value, "latin1")
  const path = Path.join(dir, "unknown-architecture.gguf")
  Fs.writeFileSync(path, bytes)
  return path
}

/** Stages a model file and activates it as `name` for `role`, signed by `key`. */
const activateFile = (store: Store.Store["Type"], key: TestKey, name: string, role: Role, path: string) =>
  Effect.gen(function*() {
    const bytes = Fs.readFileSync(path)
    const digest = sha256(bytes)
    yield* store.stage(path, digest, bytes.length)
    const manifest = new Manifest({
      name,
      role,
      revision: 1,
      artifacts: [new Artifact({ digest, size: bytes.length, mediaType: ggufMediaType })]
    })
    return yield* store.activate(envelope(key, manifest))
  })

const runtimeOptions = (root: string, trusted: ReadonlyArray<TestKey>, trustSeedKey: boolean): Partial<Runtime.RuntimeOptions> => ({
  store: { root, trustedKeys: trusted.map((k) => k.publicPem), trustSeedKey, reapGrace: Duration.zero, seed: Seed.packaged },
  admission: { contextCap: { generation: 1024, decision: 512 }, workspaceReservationBytes: 64 * 1024 * 1024 },
  worker: { child: testChild, childEnv: testRunEnv, prefillChunk: 128, stopTimeout: Duration.seconds(3) }
})

const quiet = Logger.withMinimumLogLevel(LogLevel.None)

describe("store-backed runtime start", () => {
  it.scoped("a model llama.cpp refuses and an untrusted activation are passed over; the role runs the newest that loads", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const root = Path.join(dir, "store")
      const kept = makeKey()
      const removed = makeKey()
      const seedChat = yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* makeStore(root, [kept, removed], { trustSeedKey: true, seed: Seed.packaged })
        yield* store.importSeed
        const active = yield* store.active({ model: "qwen-chat" })
        yield* activateFile(store, removed, "untrusted", "generation", ensureModel("tiny"))
        yield* activateFile(store, kept, "broken", "generation", unknownArchitecture(dir))
        return active
      }))
      // Started without the removed key: broken (newest) does not load, untrusted is passed over.
      const context = yield* Layer.build(Runtime.layer(runtimeOptions(root, [kept], true))).pipe(quiet)
      const provider = Context.get(context, Provider)
      const readiness = yield* provider.readiness
      assert.strictEqual(readiness.state, "ready")
      const generation = readiness.roles.find((r) => r.role === "generation")!
      assert.strictEqual(generation.manifestDigest, seedChat.manifestDigest)
      assert.deepStrictEqual(readiness.recoveryActions.map((a) => [a.kind, a.outcome]), [["load", "fell-back"], ["trust", "fell-back"]])
      const [load, trust] = readiness.recoveryActions
      assert.match(load!.reason, /^broken revision 1 did not load for generation: .*; generation falls back to qwen-chat revision 1$/)
      assert.include(load!.reason, "cannot load model")
      assert.match(trust!.reason, /^untrusted revision 1 \(journal line 3\) passed over: manifest signed by unknown key ed25519:[0-9a-f]{16}; generation falls back to qwen-chat revision 1$/)
      // Real inference on the model it fell back to.
      const chunks = yield* Stream.runCollect(provider.generate({
        messages: [{ role: "user", content: "hello" }],
        maxTokens: 2,
        sampling: { temperature: 0 }
      }))
      const done = [...chunks].at(-1)!
      assert.strictEqual(done._tag === "Done" ? done.usage.generatedTokens : -1, 2)
    }), { timeout: 120_000 })

  it.scoped("when no model of a role loads, the start fails naming every reason", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const root = Path.join(dir, "store")
      const kept = makeKey()
      const removed = makeKey()
      yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* makeStore(root, [kept, removed])
        yield* activateFile(store, kept, "mydecision", "decision", ensureModel("decision"))
        yield* activateFile(store, removed, "untrusted", "generation", ensureModel("tiny"))
        yield* activateFile(store, kept, "broken", "generation", unknownArchitecture(dir))
      }))
      // Neither the removed key nor the seed's is trusted.
      const error = yield* Effect.flip(Layer.build(Runtime.layer(runtimeOptions(root, [kept], false)))).pipe(quiet)
      assert.strictEqual(error._tag, "NoLoadableModel")
      if (error._tag !== "NoLoadableModel") return
      assert.strictEqual(error.role, "generation")
      assert.strictEqual(error.reasons.length, 3)
      assert.match(error.reasons[0]!, /^broken revision 1 did not load: load of generation failed: cannot load model .*: Failed to load model$/)
      assert.match(error.reasons[1]!, /^untrusted revision 1 \(journal line 2\) passed over: manifest signed by unknown key/)
      assert.match(error.reasons[2]!, /^the packaged seed was not imported: manifest signed by unknown key/)
      assert.include(error.message, "no model of role generation can be started: broken revision 1 did not load")
    }), { timeout: 120_000 })
})
