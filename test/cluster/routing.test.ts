/**
 * One-off generations and decisions go to the least loaded runner. Two real runners (Unix
 * sockets, one SQLite storage): r1 is kept busy by a long generation (interrupted at the end); one-offs
 * and decisions sent through r1 are then served by r2 (the one-offs straight to r2's sink; r2 counts them as served for another
 * runner in its answer to a load probe, and r1 finishes none of them), and those sent through r2 stay on r2. Once r1 is idle
 * again, ties go to the entry: one-offs through r1 run on r1. The choice itself is a rule over
 * all loads (fast-check).
 */
import { assert, describe, it, layer } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schedule from "effect/Schedule"
import * as Stream from "effect/Stream"
import * as fc from "effect/FastCheck"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Load from "../../src/cluster/Load.js"
import { choose, makeLedger, reckoned } from "../../src/cluster/LoadRouting.js"
import type { GenerateRequest } from "../../src/domain/Inference.js"
import { clusterEnv, generationsOf, loadOf, type RunnerProcess, settled, startRunner, viewLayer } from "./membership-support.js"

const SHARDS = 6

class Pair extends Context.Tag("test/Pair")<Pair, { readonly r1: RunnerProcess; readonly r2: RunnerProcess }>() {}

const storageOf = (dir: string) => Path.join(dir, "cluster.db")

const pairLayer = Layer.unwrapScoped(Effect.gen(function*() {
  const dir = yield* Effect.acquireRelease(
    Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "ngr-"))),
    (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
  )
  const view = yield* Layer.build(viewLayer({ _tag: "Sqlite", file: storageOf(dir) }, SHARDS))
  const env = clusterEnv(storageOf(dir), SHARDS)
  // One after the other: SQLite runner storage can stall when runners start at the same moment (docs/cluster.md).
  const r1 = yield* startRunner(dir, "r1", env)
  const r2 = yield* startRunner(dir, "r2", env)
  return Layer.merge(Layer.succeed(Pair, { r1, r2 }), Layer.succeedContext(view))
}))

const oneOff: GenerateRequest = { messages: [{ role: "user", content: "say something" }], maxTokens: 4, sampling: { temperature: 0 }, thinking: false }
const decision = { prompt: "is the sea calm?", heads: [{ name: "answer", labels: ["yes", "no"] }] }

/** What `runner` has served for other runners, as it answers a load probe. */
const servedBy = (runner: RunnerProcess) =>
  loadOf(runner, SHARDS).pipe(
    Effect.map((load) => load.served),
    Effect.retry(Schedule.spaced("200 millis").pipe(Schedule.upTo("20 seconds"))),
    Effect.orDieWith((e) => new Error(`the load of ${runner.name}: ${e}`))
  )

/** How many turns and one-offs other runners sent straight to `runner`'s sink, as it answers a load probe. */
const directTurnsOf = (runner: RunnerProcess) =>
  loadOf(runner, SHARDS).pipe(
    Effect.map((load) => load.directTurns ?? 0),
    Effect.retry(Schedule.spaced("200 millis").pipe(Schedule.upTo("20 seconds"))),
    Effect.orDieWith((e) => new Error(`the load of ${runner.name}: ${e}`))
  )

const runningOn = (runner: RunnerProcess) => Effect.map(runner.provider.readiness, (r) => r.scheduler.running)

describe("one-offs and decisions by load", () => {
  layer(pairLayer, { timeout: 300_000, excludeTestServices: true })("two runners", (it) => {
    it.effect("with r1 kept busy, one-offs and decisions sent through r1 are served by r2; through r2 they stay on r2; once r1 is idle they stay on r1", () =>
      Effect.gen(function*() {
        const { r1, r2 } = yield* Pair
        yield* settled([r1, r2], SHARDS)
        const before = yield* servedBy(r2)

        // Both idle: a one-off through r1 runs on r1 (ties go to the entry).
        const r1Before = yield* generationsOf(r1)
        yield* r1.provider.generate(oneOff).pipe(Stream.runDrain)
        assert.strictEqual(yield* generationsOf(r1), r1Before + 1, "an idle entry serves its own one-off")

        yield* Effect.scoped(Effect.gen(function*() {
          // r1 busy: a long generation (sampled hot over the whole vocabulary: the script's end of
          // turn is as unlikely as any other token) runs on r1 until this scope ends.
          const started = yield* Effect.makeLatch(false)
          yield* r1.provider.generate({ ...oneOff, maxTokens: 900, sampling: { temperature: 50, topK: 0, topP: 1, seed: 1 } }).pipe(
            Stream.tap(() => started.open),
            Stream.runDrain,
            Effect.forkScoped
          )
          yield* started.await
          assert.strictEqual(yield* runningOn(r1), 1)
          const r1Busy = yield* generationsOf(r1)
          const r2Busy = yield* generationsOf(r2)
          const directBefore = yield* directTurnsOf(r2)

          // Through the busy r1: served by r2.
          for (let i = 0; i < 3; i++) {
            const chunks = Chunk.toArray(
              yield* Stream.runCollect(r1.provider.generate({ ...oneOff, messages: [{ role: "user", content: `one-off ${i}` }] }))
            )
            assert.strictEqual(chunks.at(-1)?._tag, "Done")
          }
          for (let i = 0; i < 2; i++) {
            const result = yield* r1.provider.decide(decision)
            assert.strictEqual(result.heads[0]!.labels.length, 2)
          }
          const served = yield* servedBy(r2)
          assert.deepStrictEqual(served, { generations: before.generations + 3, decisions: before.decisions + 2 })
          assert.strictEqual(yield* generationsOf(r2), r2Busy + 3, "r2 ran the three one-offs")
          assert.strictEqual(yield* generationsOf(r1), r1Busy, "r1 ran none of them")
          // Sent straight to r2's sink (its load answers name it), not through the cluster.
          assert.strictEqual(yield* directTurnsOf(r2), directBefore + 5, "r2 took the three one-offs and the two decisions straight from r1")

          // Through r2 (the least loaded itself): served on r2, not for another runner.
          yield* r2.provider.generate(oneOff).pipe(Stream.runDrain)
          yield* r2.provider.decide(decision)
          assert.strictEqual(yield* generationsOf(r2), r2Busy + 4)
          assert.strictEqual(yield* generationsOf(r1), r1Busy)
          assert.deepStrictEqual(yield* servedBy(r2), served)
          // r1 was busy all along.
          assert.strictEqual(yield* runningOn(r1), 1)
        }))

        // r1 idle again (its reader gone): one-offs through r1 stay on r1.
        yield* Effect.flatMap(runningOn(r1), (n) => n === 0 ? Effect.void : Effect.fail("still running")).pipe(
          Effect.retry(Schedule.spaced("100 millis").pipe(Schedule.upTo("10 seconds"))),
          Effect.orDie
        )
        const r1Idle = yield* generationsOf(r1)
        const r2Idle = yield* generationsOf(r2)
        yield* r1.provider.generate(oneOff).pipe(Stream.runDrain)
        assert.strictEqual(yield* generationsOf(r1), r1Idle + 1)
        assert.strictEqual(yield* generationsOf(r2), r2Idle)
      }).pipe(Effect.tapErrorCause(() => Effect.flatMap(Pair, ({ r1, r2 }) => Effect.sync(() => Fs.writeFileSync("/tmp/drain-runners.log", `r1:\n${r1.log()}\nr2:\n${r2.log()}`))))),
      120_000)
  })
})

describe("choosing a runner", () => {
  const id = fc.constantFrom("q1", "q2", "q3", "q4")
  const load = fc.record({
    address: fc.constantFrom("a", "b", "c", "d"),
    ready: fc.boolean(),
    running: fc.nat(4),
    queued: fc.nat(4),
    slots: fc.constant(2),
    shards: fc.array(fc.integer({ min: 1, max: 6 }), { maxLength: 3 }),
    served: fc.constant({ generations: 0, decisions: 0 }),
    serving: fc.uniqueArray(id, { maxLength: 3 })
  })
  const ids = fc.array(fc.tuple(fc.constantFrom("a", "b", "c", "d"), fc.uniqueArray(id, { maxLength: 3 }).map((l) => new Set(l))))
  it.prop(
    "the choice is a least loaded usable runner, the entry itself on ties; never one not ready or without shards",
    [load, fc.uniqueArray(load, { selector: (l) => l.address, maxLength: 3 }), ids, ids, fc.double({ min: 0, max: 0.999, noNaN: true })],
    ([own0, others, sentList, endedList, r]) => {
      const own = { ...own0, address: "self" }
      const known = { sent: new Map(sentList), ended: new Map(endedList) }
      const chosen = choose(own, others, known, () => r)
      const usable = others.filter((l) => l.ready && l.shards.length > 0)
      // The answer's load less the entry's requests it lists that have ended, plus those in flight it does not list.
      const reckon = (l: Load.RunnerLoad) =>
        Math.max(0, Load.pending(l) - l.serving.filter((i) => known.ended.get(l.address)?.has(i)).length) +
        [...(known.sent.get(l.address) ?? [])].filter((i) => !l.serving.includes(i)).length
      const least = Math.min(...usable.map(reckon))
      if (chosen === undefined) {
        return usable.length === 0 || (own.ready && Load.pending(own) <= least)
      }
      return usable.some((l) => l === chosen) && reckon(chosen) === least && !(own.ready && Load.pending(own) <= least)
    }
  )

  // A model of one entry sending requests to runner r2, which also runs work of its own: each
  // request is sent (entry), arrives on r2, ends there, and its end reaches the entry, in that
  // order; load answers are taken on r2 at any moment and read by the entry at any later one (a
  // late answer). Whatever the interleaving, every answer reckons to the work r2 had of its own
  // when it answered plus exactly the entry's requests in flight now.
  it.prop(
    "a load answer, however late it is read, counts the entry's requests that are in flight and none that ended",
    [
      fc.array(fc.array(fc.nat(999), { minLength: 4, maxLength: 4 }).map((t) => t.sort((x, y) => x - y)), { minLength: 1, maxLength: 5 }),
      fc.array(fc.tuple(fc.nat(999), fc.nat(3)), { minLength: 1, maxLength: 5 })
    ],
    ([requests, answers]) => {
      type Event = { readonly at: number; readonly order: number; readonly run: () => void }
      const ledger = makeLedger()
      const onR2 = new Set<string>()
      const taken: Array<{ readonly answer: Load.RunnerLoad; readonly own: number }> = []
      const events: Array<Event> = []
      requests.forEach((times, i) => {
        const q = `q${i}`
        const steps = [
          () => ledger.start("r2", q),
          () => void onR2.add(q),
          () => void onR2.delete(q),
          () => ledger.end("r2", q, times[3]!)
        ]
        steps.forEach((run, k) => events.push({ at: times[k]!, order: k, run }))
      })
      answers.forEach(([at, own]) =>
        events.push({
          at,
          order: 4,
          run: () =>
            void taken.push({
              own,
              answer: {
                address: "r2",
                ready: true,
                running: own + onR2.size,
                queued: 0,
                slots: 2,
                shards: [1],
                served: { generations: 0, decisions: 0 },
                serving: [...onR2]
              }
            })
        })
      )
      // Stable: a request's steps at one moment keep their order.
      events.sort((x, y) => x.at - y.at || x.order - y.order)
      for (const event of events) {
        event.run()
        const inFlight = ledger.known.sent.get("r2")?.size ?? 0
        for (const { answer, own } of taken) {
          if (reckoned(answer, ledger.known) !== own + inFlight) return false
        }
      }
      return true
    }
  )
})
