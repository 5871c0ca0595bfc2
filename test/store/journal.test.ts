/**
 * The activation journal (reliability case 11): torn tails are recovered (kept aside, then
 * truncated) at every possible truncation point; corruption before the tail, a missing field or
 * an unknown version is a hard error naming the line; newest per (model, device) by order.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as fc from "effect/FastCheck"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { Digest } from "../../src/domain/Digest.js"
import * as Journal from "../../src/services/store/Journal.js"
import * as Lock from "../../src/services/store/Lock.js"
import { filesUnder, makeStore, tempDir } from "./helpers.js"

const entry = (i: number, model = `m${i % 3}`, device = i % 2 === 0 ? "cpu" : "cuda:0"): Journal.Entry => ({
  v: 1,
  model,
  role: i % 2 === 0 ? "generation" : "decision",
  device,
  manifest: Digest.make(`sha256:${i.toString(16).padStart(64, "0")}`),
  revision: i + 1,
  at: new Date(Date.UTC(2030, 0, 1) - i * 1000).toISOString()
})

const linesOf = (entries: ReadonlyArray<Journal.Entry>) => Buffer.concat(entries.map(Journal.encodeLine))

/** Opens the journal in `root` under the lock and reads it. */
const readJournal = (root: string) =>
  Effect.gen(function*() {
    const lock = yield* Lock.make(root)
    const journal = yield* Journal.make(root)
    return yield* lock.withLock(journal.read)
  }).pipe(Effect.scoped, Logger.withMinimumLogLevel(LogLevel.Error))

describe("journal", () => {
  it.scoped("truncation at every byte offset recovers exactly the complete lines before it", () =>
    Effect.gen(function*() {
      const root = yield* tempDir
      const lock = yield* Lock.make(root)
      const entries = Array.from({ length: 3 }, (_, i) => entry(i))
      const full = linesOf(entries)
      const ends: Array<number> = []
      let at = 0
      for (const e of entries) {
        at += Journal.encodeLine(e).length
        ends.push(at)
      }
      const journalPath = Path.join(root, Journal.fileName)
      const asideDir = Path.join(root, Journal.recoveredDir)
      for (let cut = 0; cut <= full.length; cut++) {
        Fs.writeFileSync(journalPath, full.subarray(0, cut))
        const state = yield* lock.withLock(Effect.flatMap(Journal.make(root), (j) => j.read)).pipe(Effect.scoped).pipe(Logger.withMinimumLogLevel(LogLevel.Error))
        const complete = ends.filter((end) => end <= cut).length
        assert.deepStrictEqual(state.entries.map((e) => e.entry), entries.slice(0, complete), `cut at ${cut}`)
        const kept = ends.filter((end) => end <= cut).at(-1) ?? 0
        assert.strictEqual(Fs.statSync(journalPath).size, kept, `truncated at ${cut}`)
        const aside = filesUnder(asideDir)
        if (kept === cut) {
          assert.deepStrictEqual(aside, [], `cut at ${cut}`)
        } else {
          assert.strictEqual(aside.length, 1)
          assert.isTrue(Fs.readFileSync(Path.join(asideDir, aside[0]!)).equals(full.subarray(kept, cut)), `cut at ${cut}`)
        }
        Fs.rmSync(asideDir, { recursive: true, force: true })
      }
      // After a recovery, reading again is stable.
      Fs.writeFileSync(journalPath, full.subarray(0, full.length - 5))
      yield* lock.withLock(Effect.flatMap(Journal.make(root), (j) => j.read)).pipe(Effect.scoped).pipe(Logger.withMinimumLogLevel(LogLevel.Error))
      assert.strictEqual((yield* lock.withLock(Effect.flatMap(Journal.make(root), (j) => j.read)).pipe(Effect.scoped)).entries.length, 2)
    }))

  it.prop(
    "a NUL-filled or partial tail after any prefix of lines is dropped; the lines before it survive",
    [
      fc.integer({ min: 0, max: 6 }),
      fc.oneof(
        fc.integer({ min: 1, max: 300 }).map((n) => Buffer.alloc(n)),
        fc.uint8Array({ minLength: 1, maxLength: 200 }).map((b) => Buffer.from(b.map((x) => x === 0x0a ? 0x20 : x)))
      )
    ],
    ([n, tail]) => {
      const entries = Array.from({ length: n }, (_, i) => entry(i))
      const bytes = Buffer.concat([linesOf(entries), tail])
      const parsed = Journal.parse(bytes, "j")
      return Either.isRight(parsed) && parsed.right.entries.length === n && parsed.right.tail === bytes.length - tail.length
    }
  )

  it.scoped("a corrupt line before the tail, a missing field or an unknown version is a hard error naming the line", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const good = Array.from({ length: 3 }, (_, i) => Journal.encodeLine(entry(i)).toString())
      const { v: _v, ...noVersion } = entry(9)
      const { device: _d, ...noDevice } = entry(9)
      const cases: ReadonlyArray<readonly [string, string, number, string]> = [
        ["garbage", `${good[0]}{"v":1,"mod\n${good[1]}`, 2, "not JSON"],
        ["NUL line", `${good[0]}${good[1]}\0\0\0\n${good[2]}`, 3, "NUL"],
        ["empty line", `${good[0]}\n${good[1]}`, 2, "empty line"],
        ["missing field", `${good[0]}${JSON.stringify(noDevice)}\n${good[1]}`, 2, "device"],
        ["missing field last", `${good[0]}${good[1]}${JSON.stringify(noDevice)}\n`, 3, "device"],
        ["missing version", `${JSON.stringify(noVersion)}\n`, 1, "missing field v"],
        ["unknown version", `${good[0]}${JSON.stringify({ ...entry(9), v: 3 })}\n`, 2, "unknown schema version 3"],
        ["version 2 is a deactivation", `${good[0]}${JSON.stringify({ ...entry(9), v: 2 })}\n`, 2, "op"],
        ["bad digest", `${good[0]}${JSON.stringify({ ...entry(9), manifest: "sha256:../x" })}\n`, 2, "manifest"],
        ["extra field", `${JSON.stringify({ ...entry(9), extra: 1 })}\n`, 1, "extra"],
        ["array", `[1]\n`, 1, "not a JSON object"]
      ]
      for (const [name, text, line, reason] of cases) {
        const root = Path.join(dir, name.replace(/ /g, "-"))
        Fs.mkdirSync(root)
        Fs.writeFileSync(Path.join(root, Journal.fileName), text)
        const exit = yield* Effect.exit(readJournal(root))
        assert.isTrue(Exit.isFailure(exit), name)
        const error = yield* Effect.flip(readJournal(root))
        assert.deepStrictEqual(error._tag === "JournalCorrupt" ? error.line : error._tag, line, name)
        assert.include(error.message, reason, name)
        assert.include(error.message, `line ${line}`, name)
        // Never silently repaired: the file is untouched.
        assert.strictEqual(Fs.readFileSync(Path.join(root, Journal.fileName), "utf8"), text, name)
        // The store refuses to open on it.
        const store = yield* Effect.flip(Effect.scoped(makeStore(root, [])))
        assert.strictEqual(store._tag, "JournalCorrupt", name)
      }
    }))

  it.scoped("the newest entry per (model, device) is decided by journal order, not by time", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      // Timestamps run backwards (entry() subtracts i seconds); order must still win.
      const entries = Array.from({ length: 12 }, (_, i) => entry(i))
      Fs.writeFileSync(Path.join(dir, Journal.fileName), linesOf(entries))
      const state = yield* readJournal(dir)
      const expected = new Map<string, number>()
      entries.forEach((e, i) => expected.set(Journal.key(e.model, e.device), i + 1))
      assert.deepStrictEqual(
        [...state.newest.entries()].map(([k, v]) => [k, v.line]).sort(),
        [...expected.entries()].sort()
      )
    }))

  it.scoped("append writes one canonical line, fsyncs, and a later reader sees it incrementally", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const lock = yield* Lock.make(dir)
      const writer = yield* Journal.make(dir)
      const reader = yield* Journal.make(dir)
      const { at: _a, v: _v, ...fields } = entry(1)
      yield* lock.withLock(Effect.zipRight(writer.read, writer.append(fields)))
      assert.strictEqual((yield* lock.withLock(reader.read)).entries.length, 1)
      yield* lock.withLock(Effect.zipRight(writer.read, writer.append({ ...fields, revision: 7 })))
      const state = yield* lock.withLock(reader.read)
      assert.deepStrictEqual(state.entries.map((e) => [e.line, e.entry.revision]), [[1, 2], [2, 7]])
      const text = Fs.readFileSync(Path.join(dir, Journal.fileName), "utf8")
      assert.match(text, /^\{"at":"[^"]+","device":"cuda:0","manifest":"sha256:0+1","model":"m1","revision":2,"role":"decision","v":1\}\n/)
    }))
})
