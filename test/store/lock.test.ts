/**
 * The store lock under interruption (issue 12, item 10): a holder interrupted while a write is in
 * flight keeps the lock until the write has landed, so the next holder never sees a file that is
 * still being written.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as NodeFs from "node:fs"
import * as Path from "node:path"
import * as Fs from "../../src/services/store/Fs.js"
import * as Lock from "../../src/services/store/Lock.js"
import { tempDir } from "./helpers.js"

describe("store lock", () => {
  it.scoped("a holder interrupted mid-write keeps the lock until the write has landed; the next holder sees the whole file", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const holder = yield* Lock.make(dir)
      // A second open file description: excluded by the OFD lock exactly like another process.
      const other = yield* Lock.make(dir)
      const path = Path.join(dir, "written")
      const bytes = Buffer.alloc(128 * 1024 * 1024, 0x5a)
      const fd = yield* Effect.acquireRelease(
        Effect.sync(() => NodeFs.openSync(path, "w", 0o600)),
        (fd) => Effect.sync(() => NodeFs.closeSync(fd))
      )
      const writing = yield* Deferred.make<void>()
      const writer = yield* Effect.fork(holder.withLock(
        Deferred.succeed(writing, undefined).pipe(Effect.zipRight(Fs.writeAll(fd, path, bytes)))
      ))
      // The writer goes on into the write before this fiber resumes: the write is in flight.
      yield* Deferred.await(writing)
      yield* Fiber.interruptFork(writer)
      const seen = yield* other.withLock(Effect.sync(() => NodeFs.readFileSync(path)))
      assert.strictEqual(seen.length, bytes.length, "the lock was granted while the write was still landing")
      assert.isTrue(seen.equals(bytes))
      const exit = yield* Fiber.await(writer)
      assert.isTrue(Exit.isInterrupted(exit))
    }), { timeout: 30_000 })
})
