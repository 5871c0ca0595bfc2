/**
 * Real crashes (reliability case 5): a child process stages and activates, and SIGKILLs itself
 * right after one step (write, fsync, link, directory sync, manifest rename, journal write). On
 * reopening, each blob is absent or present and verified, staging leftovers are gone, the journal
 * never names a missing blob, and the same import then succeeds.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Fs from "node:fs"
import * as Path from "node:path"
import * as Journal from "../../src/services/store/Journal.js"
import { bytesOf, envelope, filesUnder, makeKey, makeStore, manifestOf, runChild, sha256, tempDir } from "./helpers.js"

type Expect = { readonly blob: boolean; readonly journaled: boolean }

const steps: ReadonlyArray<readonly [string, Expect]> = [
  ["write", { blob: false, journaled: false }],
  ["fsync", { blob: false, journaled: false }],
  ["link", { blob: true, journaled: false }],
  ["dirsync", { blob: true, journaled: false }],
  ["manifest", { blob: true, journaled: false }],
  ["journal-torn", { blob: true, journaled: false }],
  ["journal", { blob: true, journaled: true }],
  ["journal-fsync", { blob: true, journaled: true }],
  ["none", { blob: true, journaled: true }]
]

describe("kill at each step (case 5)", () => {
  it.scoped("each blob is absent or present and verified; the journal never names a missing blob; re-import succeeds", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const key = makeKey()
      const bytes = bytesOf("crash", 9 * 1024 * 1024 + 4097)
      const digest = sha256(bytes)
      const source = Path.join(dir, "source")
      Fs.writeFileSync(source, bytes)
      const signed = envelope(key, manifestOf("m", 1, [{ digest, size: bytes.length }]))
      const exits = yield* Effect.forEach(steps, ([step]) =>
        runChild(
          "stage-activate",
          { root: Path.join(dir, step), publicPem: key.publicPem, source, digest, size: bytes.length, envelope: signed },
          { NATIVEGEN_TEST_DIE_AT: step }
        ), { concurrency: 3 })

      for (const [i, [step, expect]] of steps.entries()) {
        const exit = exits[i]!
        // The fault point was reached: the child died by its own SIGKILL (or finished, for "none").
        assert.deepStrictEqual([exit.signal, exit.code], step === "none" ? [null, 0] : ["SIGKILL" as const, null], `${step}: ${exit.stderr}`)
        const root = Path.join(dir, step)
        const staged = filesUnder(Path.join(root, "staging"))
        if (step === "write" || step === "fsync") assert.strictEqual(staged.length, 1, `${step} left its staging file`)
        yield* Effect.scoped(Effect.gen(function*() {
          const store = yield* makeStore(root, [key])
          assert.deepStrictEqual(filesUnder(Path.join(root, "staging")), [], `${step}: staging cleaned on open`)
          const verified = yield* Effect.exit(store.verify(digest))
          assert.strictEqual(Exit.isSuccess(verified), expect.blob, `${step}: blob`)
          if (Exit.isFailure(verified)) {
            assert.deepStrictEqual(filesUnder(Path.join(root, "blobs")), [], `${step}: nothing half-published`)
          }
          const active = yield* Effect.exit(store.active({ model: "m" }))
          assert.strictEqual(Exit.isSuccess(active), expect.journaled, `${step}: journaled`)
          if (step === "journal-torn") {
            assert.strictEqual(filesUnder(Path.join(root, Journal.recoveredDir)).length, 1, "torn tail kept aside")
            assert.strictEqual(Fs.statSync(Path.join(root, Journal.fileName)).size, 0)
          }
          // Re-import cleanly.
          yield* store.stage(source, digest, bytes.length)
          const activation = yield* store.activate(signed)
          assert.strictEqual(activation.alreadyActive, expect.journaled, `${step}: re-activation`)
          const now = yield* store.active({ model: "m" })
          assert.strictEqual(now.artifacts[0]!.digest, digest)
          yield* store.verify(digest)
        })).pipe(Logger.withMinimumLogLevel(LogLevel.Error))
      }
    }), { timeout: 60_000 })
})
