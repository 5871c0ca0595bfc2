/**
 * The state file directory on its own (no engine: the engine's part of a save is a file written at
 * a temp path): commit checks and publishes; a crash between the state file's rename and the
 * sidecar's is caught by the sha256; a torn temp file is not published; temp files of dead
 * processes are swept at start; orphaned state files are pruned; moved-aside files are bounded;
 * a sidecar or state file that is not a regular file (a symlink, a fifo, a directory) is refused,
 * never followed or blocked on.
 */
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import { assert, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as TestClock from "effect/TestClock"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as StateFiles from "../../src/services/conversations/StateFiles.js"

const engine: StateFiles.EngineBinding = { nodeLlamaCppVersion: "3.21.1", llamaCppRelease: "b1", backend: "cpu", contextSize: 4096 }
const tokens = Uint32Array.from([1, 2, 3, 4, 5])

const directory = (options: Partial<StateFiles.Options> = {}) => {
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "nativegen-state-directory-"))
  return { directory: dir, modelDigest: "ab".repeat(32), maxSaved: 32, maxMovedAside: 8, ...options }
}

/** What the engine would do: write a state file at a temp path (here: any bytes). */
const engineWrites = (files: StateFiles.StateFiles, conversation: string, bytes: Buffer) => {
  const temp = files.tempState(conversation)
  Fs.writeFileSync(temp, bytes)
  return temp
}

layer(NodeFileSystem.layer)("state file directory", (it) => {
  it.effect("commit publishes the pair; the state file is usable only as bound", () =>
    Effect.gen(function*() {
      const options = directory()
      const files = yield* StateFiles.make(options)
      const state = Buffer.from("the kv cache")
      yield* files.commit("c", tokens, engineWrites(files, "c", state), state.length, engine)
      const stored = (yield* files.readSidecar("c"))!
      assert.deepStrictEqual(Array.from(stored.tokens), Array.from(tokens))
      assert.strictEqual(yield* files.usableState("c", stored, engine), files.paths.statePath("c"))
      assert.deepStrictEqual(Fs.readdirSync(options.directory).filter((f) => f.includes(".tmp-")), [])
    }))

  it.effect("a crash after the state file's rename, before the sidecar's: the new file is refused by its sha256, the tokens kept", () =>
    Effect.gen(function*() {
      const files = yield* StateFiles.make(directory())
      const first = Buffer.from("first state")
      yield* files.commit("c", tokens, engineWrites(files, "c", first), first.length, engine)
      // The second save's rename happened; the process died before its sidecar was written.
      Fs.writeFileSync(files.paths.statePath("c"), Buffer.from("newer state"))
      const stored = (yield* files.readSidecar("c"))!
      assert.isUndefined(yield* files.usableState("c", stored, engine))
      const after = (yield* files.readSidecar("c"))!
      assert.deepStrictEqual(Array.from(after.tokens), Array.from(tokens))
      assert.isUndefined(after.state, "the sidecar no longer binds a state file")
    }))

  it.effect("a torn temp file (shorter than the engine wrote) is not published, and removed", () =>
    Effect.gen(function*() {
      const options = directory()
      const files = yield* StateFiles.make(options)
      const whole = Buffer.from("the whole state")
      yield* files.commit("c", tokens, engineWrites(files, "c", whole), whole.length, engine)
      const torn = engineWrites(files, "c", Buffer.from("torn"))
      const error = yield* Effect.flip(files.commit("c", Uint32Array.from([9]), torn, 1_000, engine))
      assert.strictEqual(error._tag, "SaveFailed")
      assert.isFalse(Fs.existsSync(torn))
      const stored = (yield* files.readSidecar("c"))!
      assert.deepStrictEqual(Array.from(stored.tokens), Array.from(tokens), "the previous pair is untouched")
      assert.strictEqual(yield* files.usableState("c", stored, engine), files.paths.statePath("c"))
    }))

  it.effect("temp files of dead processes are swept at start; a live process's are left alone", () =>
    Effect.gen(function*() {
      const options = directory()
      const dead = ChildProcess.spawnSync(process.execPath, ["-e", "0"]).pid!
      const name = "cd".repeat(32)
      const deadTemp = Path.join(options.directory, `${name}.state.tmp-${dead}-0badc0de`)
      const liveTemp = Path.join(options.directory, `${name}.json.tmp-${process.pid}-0badc0de`)
      Fs.writeFileSync(deadTemp, "half a state")
      Fs.writeFileSync(liveTemp, "{")
      yield* StateFiles.make(options)
      assert.isFalse(Fs.existsSync(deadTemp))
      assert.isTrue(Fs.existsSync(liveTemp))
    }))

  it.effect("state files without a sidecar are pruned; moved-aside files are bounded, newest kept", () =>
    Effect.gen(function*() {
      const options = directory({ maxMovedAside: 2 })
      const files = yield* StateFiles.make(options)
      const orphan = Path.join(options.directory, `${"ef".repeat(32)}.state`)
      Fs.writeFileSync(orphan, "no sidecar names me")
      for (const conversation of ["a", "b", "c", "d"]) {
        const state = Buffer.from(`state of ${conversation}`)
        yield* files.commit(conversation, tokens, engineWrites(files, conversation, state), state.length, engine)
        assert.isFalse(Fs.existsSync(orphan))
        Fs.appendFileSync(files.paths.statePath(conversation), "tampered")
        yield* TestClock.adjust("1 second")
        assert.isUndefined(yield* files.usableState(conversation, (yield* files.readSidecar(conversation))!, engine))
      }
      const movedAside = Fs.readdirSync(options.directory).filter((f) => f.includes(".bad-"))
      assert.deepStrictEqual(
        movedAside.sort(),
        ["c", "d"].map((c) => `${Path.basename(files.paths.statePath(c))}.bad-size-${c === "c" ? 3000 : 4000}`).sort()
      )
    }))

  it.effect("a sidecar that is a symlink, a fifo or a directory is refused (not-a-file), moved aside, never followed or blocked on", () =>
    Effect.gen(function*() {
      const options = directory()
      const files = yield* StateFiles.make(options)
      const plants: ReadonlyArray<readonly [kind: string, plant: (path: string) => void]> = [
        ["symlink", (path) => Fs.symlinkSync("/etc/passwd", path)],
        ["fifo", (path) => ChildProcess.execFileSync("mkfifo", [path])],
        ["directory", (path) => Fs.mkdirSync(path)]
      ]
      for (const [kind, plant] of plants) {
        const conversation = `planted-${kind}`
        const state = Buffer.from(`state of ${conversation}`)
        yield* files.commit(conversation, tokens, engineWrites(files, conversation, state), state.length, engine)
        Fs.rmSync(files.paths.sidecarPath(conversation))
        plant(files.paths.sidecarPath(conversation))
        const error = yield* Effect.flip(files.readSidecar(conversation))
        assert.strictEqual(error.reason, "not-a-file", kind)
        assert.strictEqual(error.detail, `its sidecar is a ${kind}`)
        assert.isFalse(Fs.existsSync(files.paths.sidecarPath(conversation)), `${kind}: moved aside`)
        assert.lengthOf(Fs.readdirSync(options.directory).filter((f) => f.startsWith(`${Path.basename(files.paths.sidecarPath(conversation))}.bad-not-a-file-`)), 1)
      }
    }))

  it.effect("a state file replaced by a symlink to its own bytes is refused (not-a-file); the tokens are kept", () =>
    Effect.gen(function*() {
      const options = directory()
      const files = yield* StateFiles.make(options)
      const state = Buffer.from("the kv cache")
      yield* files.commit("c", tokens, engineWrites(files, "c", state), state.length, engine)
      // Same size, same sha256: only the kind of file gives it away.
      const elsewhere = Path.join(Fs.mkdtempSync(Path.join(Os.tmpdir(), "nativegen-elsewhere-")), "state")
      Fs.renameSync(files.paths.statePath("c"), elsewhere)
      Fs.symlinkSync(elsewhere, files.paths.statePath("c"))
      const stored = (yield* files.readSidecar("c"))!
      assert.isUndefined(yield* files.usableState("c", stored, engine))
      assert.lengthOf(Fs.readdirSync(options.directory).filter((f) => f.startsWith(`${Path.basename(files.paths.statePath("c"))}.bad-not-a-file-`)), 1)
      const after = (yield* files.readSidecar("c"))!
      assert.deepStrictEqual(Array.from(after.tokens), Array.from(tokens))
      assert.isUndefined(after.state)
      assert.deepStrictEqual(Fs.readFileSync(elsewhere), state, "the file the symlink named is untouched")
    }))
})
