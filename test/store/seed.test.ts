/**
 * The packaged seed (reliability case 10): the shipped manifests verify against the shipped key
 * and the generated models; importSeed activates the generation and decision models and is
 * idempotent; a tampered manifest or tampered model bytes fail closed; a crash mid-import is
 * followed by a clean import.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Exit from "effect/Exit"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { pinnedDigests } from "../../fixtures/models.js"
import * as Store from "../../src/services/Store.js"
import * as Seed from "../../src/services/store/Seed.js"
import { StoreIoError } from "../../src/services/StoreError.js"
import { filesUnder, makeStore, projectRoot, runChild, tempDir } from "./helpers.js"

const seedDir = Path.join(projectRoot, "fixtures", "seed")

/** A copy of the packaged seed that a test may tamper with. */
const copySeed = (dir: string) => {
  const copy = Path.join(dir, "seed")
  Fs.cpSync(seedDir, copy, { recursive: true })
  return copy
}

const seedStore = (root: string, dir: string, materialize = Seed.generate) =>
  makeStore(root, [], { trustSeedKey: true, seed: { dir, materialize } })

describe("packaged seed (case 10)", () => {
  it.scoped("ships signed manifests for qwen-chat (generation) and qwen-decision (decision) and the key, never the private key", () =>
    Effect.gen(function*() {
      assert.deepStrictEqual(Fs.readdirSync(seedDir).sort(), ["qwen-chat.manifest.json", "qwen-decision.manifest.json", "seed.pub"])
      const tracked = Fs.readdirSync(Path.join(projectRoot, "fixtures"), { recursive: true }).map(String)
      assert.isFalse(tracked.some((f) => f.endsWith(".key")), "no private key under fixtures/")
      const chat = JSON.parse(Fs.readFileSync(Path.join(seedDir, "qwen-chat.manifest.json"), "utf8"))
      assert.strictEqual(chat.manifest.artifacts[0].digest, pinnedDigests["qwen-chat"])
      const decision = JSON.parse(Fs.readFileSync(Path.join(seedDir, "qwen-decision.manifest.json"), "utf8"))
      assert.strictEqual(decision.manifest.artifacts[0].digest, pinnedDigests["qwen-decision"])
      assert.strictEqual(decision.manifest.role, "decision")
    }))

  it.scoped("importSeed generates, stages, verifies and activates both models; a second import changes nothing", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const store = yield* seedStore(Path.join(dir, "store"), seedDir)
      const report = yield* store.importSeed
      assert.deepStrictEqual(report.models.map((m) => [m.model, m.role, m.alreadyActive]), [
        ["qwen-chat", "generation", false],
        ["qwen-decision", "decision", false]
      ])
      const generation = yield* store.active({ role: "generation" })
      const decision = yield* store.active({ role: "decision" })
      assert.strictEqual(generation.artifacts[0]!.digest, pinnedDigests["qwen-chat"])
      assert.strictEqual(decision.artifacts[0]!.digest, pinnedDigests["qwen-decision"])
      yield* store.verify(generation.artifacts[0]!.digest)
      const journal = Fs.readFileSync(Path.join(store.root, "journal.jsonl"), "utf8")
      const again = yield* store.importSeed
      assert.isTrue(again.models.every((m) => m.alreadyActive))
      assert.strictEqual(Fs.readFileSync(Path.join(store.root, "journal.jsonl"), "utf8"), journal)
      assert.deepStrictEqual(filesUnder(Path.join(store.root, "staging")), [])
      assert.deepStrictEqual(filesUnder(Path.join(store.root, "leases")), [])
    }))

  it.scoped("a later import heals a corrupt or missing seed blob without journaling anything", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const store = yield* seedStore(Path.join(dir, "store"), seedDir)
      yield* store.importSeed
      const chat = (yield* store.active({ model: "qwen-chat" })).artifacts[0]!.path
      const decision = (yield* store.active({ model: "qwen-decision" })).artifacts[0]!.path
      Fs.chmodSync(chat, 0o644)
      const fd = Fs.openSync(chat, "r+")
      Fs.writeSync(fd, Buffer.from([0x5a]), 0, 1, 4242)
      Fs.closeSync(fd)
      Fs.rmSync(decision)
      const journal = Fs.readFileSync(Path.join(store.root, "journal.jsonl"), "utf8")
      const report = yield* store.importSeed.pipe(Logger.withMinimumLogLevel(LogLevel.Error))
      assert.isTrue(report.models.every((m) => m.alreadyActive))
      assert.strictEqual(Fs.readFileSync(Path.join(store.root, "journal.jsonl"), "utf8"), journal)
      assert.strictEqual(filesUnder(Path.join(store.root, "quarantine")).length, 1)
      yield* store.verify(pinnedDigests["qwen-chat"])
      yield* store.verify(pinnedDigests["qwen-decision"])
    }))

  it.scoped("layerSeeded is ready with both roles active", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const layer = Store.layerSeeded.pipe(
        Layer.provide(Store.StoreConfig.layer({ root: Path.join(dir, "store"), seed: Seed.packaged }))
      )
      const roles = yield* Effect.provide(
        Effect.flatMap(Store.Store, (store) => Effect.all([store.active({ role: "generation" }), store.active({ role: "decision" })])),
        layer
      )
      assert.deepStrictEqual(roles.map((a) => a.model), ["qwen-chat", "qwen-decision"])
    }))

  it.scoped("a tampered seed manifest fails closed", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const copy = copySeed(dir)
      const file = Path.join(copy, "qwen-chat.manifest.json")
      Fs.writeFileSync(file, Fs.readFileSync(file, "utf8").replace(`"revision":1`, `"revision":9`))
      const store = yield* seedStore(Path.join(dir, "store"), copy)
      const error = yield* Effect.flip(store.importSeed)
      assert.strictEqual(error._tag, "BadSignature")
      const chat = yield* Effect.exit(store.active({ model: "qwen-chat" }))
      assert.isTrue(Exit.isFailure(chat))
    }))

  it.scoped("tampered model bytes fail closed with nothing published; the next import with good bytes succeeds", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const root = Path.join(dir, "store")
      const tampered = (model: string, path: string) =>
        Effect.flatMap(Seed.generate(model, path), () =>
          Effect.try({
            try: () => {
              const fd = Fs.openSync(path, "r+")
              Fs.writeSync(fd, Buffer.from([0xff]), 0, 1, 100_000)
              Fs.closeSync(fd)
            },
            catch: (cause) => new StoreIoError({ operation: "tamper", path, cause })
          }))
      yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* seedStore(root, seedDir, tampered)
        const error = yield* Effect.flip(store.importSeed)
        assert.strictEqual(error._tag, "DigestMismatch")
        assert.deepStrictEqual(filesUnder(Path.join(store.root, "blobs")), [])
        assert.deepStrictEqual(filesUnder(Path.join(store.root, "staging")), [])
        assert.isTrue(Exit.isFailure(yield* Effect.exit(store.active({ role: "generation" }))))
      }))
      const store = yield* seedStore(root, seedDir)
      yield* store.importSeed
      assert.strictEqual((yield* store.active({ role: "generation" })).artifacts[0]!.digest, pinnedDigests["qwen-chat"])
    }))

  it.scoped("an untrusted seed key is refused, naming the key", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const store = yield* makeStore(Path.join(dir, "store"), [], { trustSeedKey: false, seed: Seed.packaged })
      const error = yield* Effect.flip(store.importSeed)
      assert.strictEqual(error._tag, "UnknownKey")
      assert.include(error.message, "ed25519:")
    }))

  it.scoped("a crash mid-import (while generating, staging or journaling) is followed by a clean import", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const steps = ["fsync", "link", "journal-torn"] as const
      const exits = yield* Effect.forEach(
        steps,
        (step) => runChild("seed", { root: Path.join(dir, step), seedDir }, { NATIVEGEN_TEST_DIE_AT: step }),
        { concurrency: 3 }
      )
      for (const [i, step] of steps.entries()) {
        assert.strictEqual(exits[i]!.signal, "SIGKILL", `${step}: ${exits[i]!.stderr}`)
        yield* Effect.scoped(Effect.gen(function*() {
          const store = yield* seedStore(Path.join(dir, step), seedDir)
          const report = yield* store.importSeed
          assert.strictEqual(report.models.length, 2, step)
          assert.strictEqual((yield* store.active({ role: "generation" })).artifacts[0]!.digest, pinnedDigests["qwen-chat"], step)
          assert.strictEqual((yield* store.active({ role: "decision" })).artifacts[0]!.digest, pinnedDigests["qwen-decision"], step)
          assert.deepStrictEqual(filesUnder(Path.join(store.root, "staging")), [], step)
        })).pipe(Logger.withMinimumLogLevel(LogLevel.Error))
      }
    }), { timeout: 60_000 })
})
