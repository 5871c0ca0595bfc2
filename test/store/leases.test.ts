/**
 * Leases and reaping (reliability case 13): a leased blob survives reaping and is collected
 * after release; leases are reference counted; a lease held by another live process protects
 * the blob and a dead holder's lease does not; a reap racing publish and activation never
 * deletes what was just activated.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as TestClock from "effect/TestClock"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { bytesOf, envelope, filesUnder, makeKey, makeStore, manifestOf, sha256, spawnChild, tempDir } from "./helpers.js"

const blob = (seed: string, size = 4096) => {
  const bytes = bytesOf(seed, size)
  return { bytes, digest: sha256(bytes), size }
}

describe("leases and reaping (case 13)", () => {
  it.scoped("a leased blob survives reaping; after release it is collected; referenced blobs stay", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const key = makeKey()
      const store = yield* makeStore(Path.join(dir, "store"), [key])
      const a = blob("a")
      const b = blob("b")
      yield* store.stage(Stream.make(a.bytes), a.digest, a.size)
      yield* store.stage(Stream.make(b.bytes), b.digest, b.size)
      yield* store.activate(envelope(key, manifestOf("m", 1, [a])))
      const scope = yield* Scope.make()
      const lease = yield* store.lease(b.digest).pipe(Scope.extend(scope))
      assert.strictEqual(lease.path, Path.join(store.root, "blobs", "sha256", b.digest.slice(7, 9), b.digest.slice(7)))
      const first = yield* store.reap()
      assert.deepStrictEqual([first.removed, first.kept], [[], [b.digest]])
      const listing = yield* store.list
      assert.deepStrictEqual(
        listing.blobs.map((x) => [x.digest, x.referenced, x.leased]).sort(),
        [[a.digest, true, false], [b.digest, false, true]].sort()
      )
      yield* Scope.close(scope, Exit.void)
      const second = yield* store.reap()
      assert.deepStrictEqual([second.removed, second.freedBytes], [[b.digest], b.size])
      assert.isFalse(Fs.existsSync(lease.path))
      yield* store.verify(a.digest)
      assert.deepStrictEqual(filesUnder(Path.join(store.root, "leases")), [])
    }))

  it.scoped("leases are reference counted in a process: one lease file, removed when the last holder releases", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const store = yield* makeStore(Path.join(dir, "store"), [])
      const a = blob("rc")
      yield* store.stage(Stream.make(a.bytes), a.digest, a.size)
      const s1 = yield* Scope.make()
      const s2 = yield* Scope.make()
      yield* store.lease(a.digest).pipe(Scope.extend(s1))
      yield* store.lease(a.digest).pipe(Scope.extend(s2))
      assert.strictEqual(filesUnder(Path.join(store.root, "leases")).length, 1)
      yield* Scope.close(s1, Exit.void)
      assert.deepStrictEqual((yield* store.reap()).removed, [])
      yield* Scope.close(s2, Exit.void)
      assert.deepStrictEqual(filesUnder(Path.join(store.root, "leases")), [])
      assert.deepStrictEqual((yield* store.reap()).removed, [a.digest])
      const missing = yield* Effect.flip(Effect.scoped(store.lease(a.digest)))
      assert.strictEqual(missing._tag, "ArtifactMissing")
      assert.deepStrictEqual(filesUnder(Path.join(store.root, "leases")), [])
    }))

  it.scoped("an interrupted holder releases its lease", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const store = yield* makeStore(Path.join(dir, "store"), [])
      const a = blob("int")
      yield* store.stage(Stream.make(a.bytes), a.digest, a.size)
      const leased = yield* Deferred.make<void>()
      const holder = yield* Effect.fork(Effect.scoped(Effect.zipRight(store.lease(a.digest), Effect.zipRight(Deferred.succeed(leased, undefined), Effect.never))))
      yield* Deferred.await(leased)
      assert.strictEqual(filesUnder(Path.join(store.root, "leases")).length, 1)
      yield* Fiber.interrupt(holder)
      assert.deepStrictEqual(filesUnder(Path.join(store.root, "leases")), [])
    }))

  it.scoped("another process's live lease protects a blob; once that process is dead its lease no longer does", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const root = Path.join(dir, "store")
      const store = yield* makeStore(root, [])
      const a = blob("xproc")
      yield* store.stage(Stream.make(a.bytes), a.digest, a.size)
      const child = yield* spawnChild("lease", { root, digest: a.digest }, {}, "pipe")
      const exited = yield* Deferred.make<NodeJS.Signals | null>()
      child.on("exit", (_code, signal) => Deferred.unsafeDone(exited, Exit.succeed(signal)))
      yield* Effect.addFinalizer(() => Effect.sync(() => child.kill("SIGKILL")))
      yield* Effect.async<void>((resume) => {
        let out = ""
        child.stdout?.on("data", (d: Buffer) => {
          out += d.toString()
          if (out.includes("leased")) resume(Effect.void)
        })
      })
      const whileAlive = yield* store.reap()
      assert.deepStrictEqual([whileAlive.removed, whileAlive.kept, whileAlive.staleLeases], [[], [a.digest], 0])
      child.kill("SIGKILL")
      assert.strictEqual(yield* Deferred.await(exited), "SIGKILL")
      assert.strictEqual(filesUnder(Path.join(root, "leases")).length, 1, "the dead process left its lease file")
      const afterDeath = yield* store.reap()
      assert.deepStrictEqual([afterDeath.removed, afterDeath.staleLeases], [[a.digest], 1])
      assert.deepStrictEqual(filesUnder(Path.join(root, "leases")), [])
    }), { timeout: 30_000 })

  it.scoped("unreferenced blobs younger than the grace period are kept", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const store = yield* makeStore(Path.join(dir, "store"), [], { reapGrace: Duration.minutes(10) })
      const a = blob("young")
      yield* store.stage(Stream.make(a.bytes), a.digest, a.size)
      // The TestClock stands at 1970: move it to the real present, where the blob is seconds old.
      yield* TestClock.setTime(Date.now())
      assert.deepStrictEqual((yield* store.reap()).kept, [a.digest])
      assert.deepStrictEqual((yield* store.reap({ grace: 0 })).removed, [a.digest])
    }))

  it.scoped("a reap racing publish and activation never deletes the just-activated artifact", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const key = makeKey()
      const store = yield* makeStore(Path.join(dir, "store"), [key])
      const reaper = yield* Effect.fork(Effect.forever(Effect.zipRight(store.reap(), Effect.yieldNow())))
      let missing = 0
      for (let i = 1; i <= 12; i++) {
        const x = blob(`race-${i}`, 2048)
        // Unprotected: stage then activate. A reap in between may collect the blob; then activation
        // must fail with ArtifactMissing, never journal a manifest whose blob is gone.
        const exit = yield* Effect.exit(Effect.zipRight(
          store.stage(Stream.make(x.bytes), x.digest, x.size),
          store.activate(envelope(key, manifestOf("racy", i, [x])))
        ))
        if (Exit.isFailure(exit)) {
          const error = yield* Effect.flip(exit)
          assert.strictEqual(error._tag, "ArtifactMissing", error.message)
          missing++
        } else {
          const active = yield* store.active({ model: "racy" })
          assert.strictEqual(active.revision, i)
        }
        // Protected by a lease across stage and activation: always succeeds.
        const y = blob(`safe-${i}`, 2048)
        yield* Effect.scoped(Effect.gen(function*() {
          yield* store.stageLeased(Stream.make(y.bytes), y.digest, y.size)
          yield* store.activate(envelope(key, manifestOf("safe", i, [y])))
        }))
        // After activation the artifact is referenced: no reap removes it.
        yield* store.reap()
        yield* store.verify(y.digest)
        const safe = yield* store.active({ model: "safe" })
        assert.strictEqual(safe.artifacts[0]!.digest, y.digest)
      }
      yield* Fiber.interrupt(reaper)
      // Whatever the interleaving, the active racy manifest (if any) names a present blob.
      const racy = yield* Effect.exit(store.active({ model: "racy" }))
      if (Exit.isSuccess(racy)) yield* store.verify(racy.value.artifacts[0]!.digest)
      yield* Effect.logDebug(`racy activations that lost their blob to the reaper: ${missing}`)
    }))
})
