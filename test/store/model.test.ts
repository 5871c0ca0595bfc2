/**
 * Model-based test (fast-check `commands`): random sequences of stage, activate, lease, release
 * and reap against the real store, checked after every step against a simple model: which blobs
 * are present, which one the active manifest names, and how many leases each has.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import fc from "fast-check"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import type { Store } from "../../src/services/Store.js"
import { bytesOf, envelope, makeKey, makeStore, manifestOf, sha256 } from "./helpers.js"

const blobs = Array.from({ length: 3 }, (_, i) => {
  const bytes = bytesOf(`model-${i}`, 512 + i * 97)
  return { bytes, digest: sha256(bytes), size: bytes.length }
})
const key = makeKey()

interface Model {
  present: Set<number>
  active: number | undefined
  revision: number
  leases: Array<number>
}

interface Real {
  readonly store: Store["Type"]
  readonly held: Array<Array<Scope.CloseableScope>>
}

const run = <A, E>(effect: Effect.Effect<A, E>) =>
  Effect.runPromise(Effect.exit(effect).pipe(Logger.withMinimumLogLevel(LogLevel.Error)))

const failureTag = (exit: Exit.Exit<unknown, { readonly _tag: string }>) =>
  Exit.isFailure(exit) && exit.cause._tag === "Fail" ? exit.cause.error._tag : undefined

/** After every command: the store shows exactly what the model says. */
const checkInvariants = async (m: Readonly<Model>, r: Real) => {
  const listing = await run(r.store.list)
  assert.isTrue(Exit.isSuccess(listing))
  if (Exit.isSuccess(listing)) {
    assert.deepStrictEqual(listing.value.blobs.map((b) => b.digest).sort(), [...m.present].map((i) => blobs[i]!.digest).sort())
    for (const b of listing.value.blobs) {
      const i = blobs.findIndex((x) => x.digest === b.digest)
      assert.strictEqual(b.leased, m.leases[i]! > 0)
      assert.strictEqual(b.referenced, m.active === i)
    }
  }
  const active = await run(r.store.active({ model: "mb" }))
  if (m.active === undefined) assert.strictEqual(failureTag(active), "NotActive")
  else if (Exit.isSuccess(active)) assert.deepStrictEqual([active.value.revision, active.value.artifacts[0]!.digest], [m.revision, blobs[m.active]!.digest])
  else assert.fail(`active failed: ${String(active.cause)}`)
}

class StageCommand implements fc.AsyncCommand<Model, Real> {
  constructor(readonly i: number) {}
  check = () => true
  async run(m: Model, r: Real) {
    const b = blobs[this.i]!
    const exit = await run(r.store.stage(Stream.make(b.bytes), b.digest, b.size))
    assert.isTrue(Exit.isSuccess(exit))
    m.present.add(this.i)
    await checkInvariants(m, r)
  }
  toString = () => `stage(${this.i})`
}

class ActivateCommand implements fc.AsyncCommand<Model, Real> {
  constructor(readonly i: number) {}
  check = () => true
  async run(m: Model, r: Real) {
    const b = blobs[this.i]!
    const exit = await run(r.store.activate(envelope(key, manifestOf("mb", m.revision + 1, [b]))))
    if (m.present.has(this.i)) {
      assert.isTrue(Exit.isSuccess(exit))
      m.active = this.i
      m.revision++
    } else {
      assert.strictEqual(failureTag(exit), "ArtifactMissing")
    }
    await checkInvariants(m, r)
  }
  toString = () => `activate(${this.i})`
}

class LeaseCommand implements fc.AsyncCommand<Model, Real> {
  constructor(readonly i: number) {}
  check = () => true
  async run(m: Model, r: Real) {
    const scope = Effect.runSync(Scope.make())
    const exit = await run(Scope.extend(r.store.lease(blobs[this.i]!.digest), scope))
    if (m.present.has(this.i)) {
      assert.isTrue(Exit.isSuccess(exit))
      r.held[this.i]!.push(scope)
      m.leases[this.i]!++
    } else {
      assert.strictEqual(failureTag(exit), "ArtifactMissing")
      await run(Scope.close(scope, Exit.void))
    }
    await checkInvariants(m, r)
  }
  toString = () => `lease(${this.i})`
}

class ReleaseCommand implements fc.AsyncCommand<Model, Real> {
  constructor(readonly i: number) {}
  check = (m: Readonly<Model>) => m.leases[this.i]! > 0
  async run(m: Model, r: Real) {
    const scope = r.held[this.i]!.pop()
    if (scope === undefined) return assert.fail("no scope")
    await run(Scope.close(scope, Exit.void))
    m.leases[this.i]!--
    await checkInvariants(m, r)
  }
  toString = () => `release(${this.i})`
}

class ReapCommand implements fc.AsyncCommand<Model, Real> {
  check = () => true
  async run(m: Model, r: Real) {
    const exit = await run(r.store.reap())
    const expected = [...m.present].filter((i) => i !== m.active && m.leases[i] === 0)
    assert.isTrue(Exit.isSuccess(exit))
    if (Exit.isSuccess(exit)) {
      assert.deepStrictEqual([...exit.value.removed].sort(), expected.map((i) => blobs[i]!.digest).sort())
    }
    for (const i of expected) m.present.delete(i)
    await checkInvariants(m, r)
  }
  toString = () => "reap"
}

const index = fc.integer({ min: 0, max: blobs.length - 1 })
const commands = [
  index.map((i) => new StageCommand(i)),
  index.map((i) => new ActivateCommand(i)),
  index.map((i) => new LeaseCommand(i)),
  index.map((i) => new ReleaseCommand(i)),
  fc.constant(new ReapCommand())
]

describe("store model", () => {
  it("stage/activate/lease/release/reap agree with a simple model", async () => {
    await fc.assert(
      fc.asyncProperty(fc.commands(commands, { maxCommands: 30, size: "medium" }), async (cmds) => {
        const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "nativegen-store-model-"))
        const scope = Effect.runSync(Scope.make())
        try {
          const store = await Effect.runPromise(Scope.extend(makeStore(Path.join(dir, "store"), [key]), scope))
          const real: Real = { store, held: blobs.map(() => []) }
          const model: Model = { present: new Set(), active: undefined, revision: 0, leases: blobs.map(() => 0) }
          await fc.asyncModelRun(() => ({ model, real }), cmds)
          for (const held of real.held) for (const s of held) await run(Scope.close(s, Exit.void))
        } finally {
          await Effect.runPromise(Scope.close(scope, Exit.void))
          Fs.rmSync(dir, { recursive: true, force: true })
        }
      }),
      { numRuns: 15 }
    )
  }, 60_000)
})
