/**
 * The engine child SIGKILLed while it saves a conversation's state, for real: the test watches the
 * state directory (inotify) and kills the child the moment its temp state file appears, while the
 * child writes and fsyncs ~2 MB. The save never completes: nothing but the temp file was written,
 * and it is removed; the turn that caused the save is served by the repaired child; the killed
 * conversation's next turn recomputes from its held tokens, equal to a cold run; and the graceful
 * stop, now with the replacement child, saves it.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Fs from "node:fs"
import * as Path from "node:path"
import type { ChatMessage } from "../../src/domain/Inference.js"
import { NativeWorker } from "../../src/services/NativeWorker.js"
import { Provider } from "../../src/services/Provider.js"
import { runtimeLayer } from "../support/engine.js"
import { collect, done, filesOf, named, tempDir, turnEqualToCold, withWarnings } from "./support.js"

const directory = tempDir()
const runtime = runtimeLayer({
  conversationsDirectory: directory,
  scheduler: { slots: 1 },
  admission: { contextCap: { generation: 8192, decision: 1024 }, workspaceReservationBytes: 64 * 1024 * 1024 }
})

/** The turns, on a running runtime: a long conversation, another one whose turn saves it (killed mid-save), the long one's next turn. */
const turns = Effect.gen(function*() {
  const provider = yield* Provider
  const worker = yield* NativeWorker
  // A long conversation: its state file (~2 MB) takes milliseconds to write and fsync.
  const line = "log the wind and the sail at night. "
  const count = (repeats: number) =>
    Effect.map(provider.count({ messages: [{ role: "user", content: line.repeat(repeats) }] }), (c) => c.tokens)
  const perLine = ((yield* count(20)) - (yield* count(10))) / 10
  const user: ChatMessage = { role: "user", content: line.repeat(Math.floor(7_500 / perLine)) }
  const first = done(yield* collect({ messages: [user], conversation: "killed", maxTokens: 4 })).checkpoint!
  assert.isAbove(first.tokens, 7_000)
  const files = filesOf(directory, "killed")
  const pid = (yield* worker.readiness).pid!
  const watch = yield* Effect.acquireRelease(
    Effect.sync(() => {
      const state = { killed: false }
      const watcher = Fs.watch(files.dir, (_, name) => {
        if (!state.killed && name !== null && name.startsWith(`${Path.basename(files.state)}.tmp-`)) {
          state.killed = true
          process.kill(pid, "SIGKILL")
        }
      })
      return { state, watcher }
    }),
    ({ watcher }) => Effect.sync(() => watcher.close())
  )
  // Another conversation takes the only slot: its turn saves "killed", and the child dies mid-save.
  const { result: other, warnings } = yield* withWarnings(
    collect({ messages: [{ role: "user", content: "a short one" }], conversation: "after-kill", maxTokens: 2 })
  )
  assert.isTrue(watch.state.killed, "the child was killed")
  assert.strictEqual(done(other).usage.generatedTokens, 2)
  assert.notStrictEqual((yield* worker.readiness).pid, pid, "a replacement child serves")
  assert.isTrue(warnings.some((w) => w.includes("conversation killed could not be saved")), warnings.join("\n"))
  // The save never completed: no sidecar, no state file, and the temp file is gone.
  assert.deepStrictEqual(named(files.dir, Path.basename(files.state, ".state")), [])
  const next = yield* turnEqualToCold({
    messages: [user, { role: "assistant", content: "x" }, { role: "user", content: "go on" }],
    conversation: "killed",
    checkpoint: first,
    maxTokens: 4
  })
  assert.include(["cold", "prefix"], next.usage.reuse)
  assert.strictEqual(next.usage.promptTokens, next.checkpoint!.tokens - 4)
  return files
})

describe("SIGKILL of the engine child mid-save", () => {
  it.live("the save leaves nothing behind; the next turn equals a cold run; the graceful stop saves through the replacement", () =>
    Effect.gen(function*() {
      const files = yield* Effect.scoped(Effect.flatMap(Layer.build(runtime), (context) => Effect.provide(Effect.scoped(turns), context)))
      // The runtime has stopped: its graceful stop saved the conversation, held in the replacement child.
      const sidecar = JSON.parse(Fs.readFileSync(files.sidecar, "utf8"))
      assert.strictEqual(sidecar.conversation, "killed")
      assert.strictEqual(sidecar.state?.bytes, Fs.statSync(files.state).size)
    }), { timeout: 240_000 })
})
