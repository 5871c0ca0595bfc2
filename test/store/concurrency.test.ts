/**
 * Cross-process concurrency (reliability cases 4 and 12): the store lock excludes between
 * processes (no lost read-modify-write updates), two processes appending 1,000 activations each
 * leave every line intact with the newest per (model, device) matching a model of the journal,
 * and two processes staging one digest publish it exactly once.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs"
import * as Path from "node:path"
import * as Journal from "../../src/services/store/Journal.js"
import * as Lock from "../../src/services/store/Lock.js"
import { bytesOf, filesUnder, makeKey, makeStore, runChild, sha256, tempDir } from "./helpers.js"

describe("two processes", () => {
  it.scoped("the store lock excludes across processes: 2 x 300 locked read-modify-write increments lose nothing", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const counter = Path.join(dir, "counter")
      Fs.writeFileSync(counter, "0")
      const exits = yield* Effect.all(
        [runChild("counter", { root: dir, counter, count: 300 }), runChild("counter", { root: dir, counter, count: 300 })],
        { concurrency: 2 }
      )
      for (const exit of exits) assert.strictEqual(exit.code, 0, exit.stderr)
      assert.strictEqual(Fs.readFileSync(counter, "utf8"), "600")
    }), { timeout: 60_000 })

  it.scoped("two processes append 1,000 entries each: every line intact, newest per (model, device) by journal order", () =>
    Effect.gen(function*() {
      const root = yield* tempDir
      const digest = sha256(Buffer.from("m"))
      const input = (parity: number) => ({ root, digest, parity, count: 1000 })
      const exits = yield* Effect.all([runChild("journal-append", input(0)), runChild("journal-append", input(1))], {
        concurrency: 2
      })
      for (const exit of exits) assert.strictEqual(exit.code, 0, exit.stderr)
      const text = Fs.readFileSync(Path.join(root, Journal.fileName))
      const lines = text.toString("utf8").split("\n")
      assert.strictEqual(lines.pop(), "", "ends with a newline")
      assert.strictEqual(lines.length, 2000)
      const entries = lines.map((line, i) => {
        const parsed = Journal.parseLine(Buffer.from(line), i + 1, "journal")
        assert.strictEqual(parsed._tag, "Right", `line ${i + 1} intact`)
        return parsed._tag === "Right" ? parsed.right : undefined
      }).filter((e) => e !== undefined)
      // Each process's entries appear whole and in its own order.
      for (const parity of [0, 1]) {
        const mine = entries.filter((e) => (e.revision - 1) % 2 === parity).map((e) => e.revision)
        assert.deepStrictEqual(mine, Array.from({ length: 1000 }, (_, i) => 2 * i + parity + 1))
      }
      const switches = entries.reduce((n, e, i) => i > 0 && (e.revision - entries[i - 1]!.revision) % 2 !== 0 ? n + 1 : n, 0)
      assert.isAbove(switches, 0, "the two writers interleaved")
      // A model of the journal: the last line per (model, device) wins, whatever the revisions or clocks say.
      const model = new Map<string, number>()
      for (const e of entries) model.set(Journal.key(e.model, e.device), e.revision)
      const lock = yield* Lock.make(root)
      const journal = yield* Journal.make(root)
      const state = yield* lock.withLock(journal.read)
      assert.deepStrictEqual(
        [...state.newest.entries()].map(([k, v]) => [k, v.entry.revision]).sort(),
        [...model.entries()].sort()
      )
    }), { timeout: 60_000 })

  it.scoped("two processes activating through the store interleave safely; active() matches the journal", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const root = Path.join(dir, "store")
      const key = makeKey()
      const bytes = bytesOf("shared", 4096)
      const digest = sha256(bytes)
      const privatePem = key.privateKey.export({ type: "pkcs8", format: "pem" }).toString()
      yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* makeStore(root, [key])
        yield* store.stage(writeSource(dir, bytes), digest, bytes.length)
      }))
      const input = (parity: number) => ({ root, publicPem: key.publicPem, privatePem, digest, size: bytes.length, parity, count: 60 })
      const exits = yield* Effect.all([runChild("activate", input(0)), runChild("activate", input(1))], { concurrency: 2 })
      for (const exit of exits) assert.strictEqual(exit.code, 0, exit.stderr)
      const parsed = Journal.parse(Fs.readFileSync(Path.join(root, Journal.fileName)), "journal")
      assert.strictEqual(parsed._tag, "Right")
      if (parsed._tag !== "Right") return
      assert.strictEqual(parsed.right.entries.length, 120)
      const model = new Map<string, number>()
      for (const { entry } of parsed.right.entries) model.set(Journal.key(entry.model, entry.device), entry.revision)
      const store = yield* makeStore(root, [key])
      for (const [k, revision] of model) {
        const [name, device] = k.split("\u0000")
        const active = yield* store.active({ model: name ?? "" }, device)
        assert.strictEqual(active.revision, revision, k)
      }
    }), { timeout: 60_000 })

  it.scoped("case 4: two processes staging the same digest: exactly one publishes, no torn file", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const root = Path.join(dir, "store")
      const bytes = Crypto.randomBytes(24 * 1024 * 1024)
      const digest = sha256(bytes)
      const source = writeSource(dir, bytes)
      const input = { root, source, digest, size: bytes.length }
      const exits = yield* Effect.all([runChild("stage", input), runChild("stage", input)], { concurrency: 2 })
      for (const exit of exits) assert.strictEqual(exit.code, 0, exit.stderr)
      const links = exits.flatMap((exit) => (JSON.parse(exit.stdout) as { links: Array<string> }).links)
      assert.strictEqual(links.filter((l) => l === "published").length, 1, JSON.stringify(links))
      assert.deepStrictEqual(filesUnder(Path.join(root, "staging")), [])
      assert.deepStrictEqual(filesUnder(Path.join(root, "blobs")).length, 1)
      yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* makeStore(root, [])
        assert.strictEqual((yield* store.verify(digest)).size, bytes.length)
      }))
    }), { timeout: 60_000 })

  it.scoped("two fibers staging the same digest concurrently both succeed with one published file", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const store = yield* makeStore(Path.join(dir, "store"), [])
      const bytes = bytesOf("race", 64 * 1024)
      const digest = sha256(bytes)
      const chunks = Array.from({ length: 64 }, (_, i) => bytes.subarray(i * 1024, (i + 1) * 1024))
      const slow = Stream.fromIterable(chunks).pipe(Stream.tap(() => Effect.yieldNow()))
      const paths = yield* Effect.all([store.stage(slow, digest, bytes.length), store.stage(slow, digest, bytes.length)], {
        concurrency: 2
      })
      assert.strictEqual(paths[0], paths[1])
      assert.deepStrictEqual(filesUnder(Path.join(store.root, "staging")), [])
      assert.isTrue(Fs.readFileSync(paths[0]).equals(bytes))
    }))
})

const writeSource = (dir: string, bytes: Uint8Array) => {
  const path = Path.join(dir, `source-${sha256(bytes).slice(7, 15)}`)
  Fs.writeFileSync(path, bytes)
  return path
}
