/**
 * The entry runner's rules for one turn (RoutedTurn.routedTurn), with its two routes as
 * streams of stamped chunks: a turn goes straight to the owner the loads name, else through the
 * entity; a direct turn refused with NotOwner (the entry's view of the shards was stale), or whose
 * owner cannot be reached before any chunk, is served through the entity, whole; one cut after
 * chunks were delivered fails with GenerationFailed naming them and is not sent again, unless it
 * is resumable: then it is sent through the cluster with what was delivered, and the client gets
 * the rest, once; a turn whose runner was lost before any chunk is sent again; both a bounded
 * number of times. And a decision's
 * (RoutedTurn.routedDecision): straight to its runner, through the cluster where that runner
 * refuses or cannot be reached; its own failures are not sent again.
 */
import { RunnerAddress } from "@effect/cluster/RunnerAddress"
import { assert, describe, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as FiberId from "effect/FiberId"
import * as Stream from "effect/Stream"
import { NotOwner, SinkUnreachable } from "../../src/cluster/ChunkChannel.js"
import { lostTurnRetries, routedDecision, routedTurn, type TurnRoutes } from "../../src/cluster/RoutedTurn.js"
import { InvalidRequest } from "../../src/services/ProviderError.js"
import { GenerationFailed } from "../../src/domain/EngineError.js"
import { resumable, stamp, stampResumed, type TurnResume } from "../../src/cluster/TurnChunk.js"
import type { GenerateChunk } from "../../src/domain/Inference.js"
import { failureOf } from "../support/generation.js"
import { done, text } from "./chunks.js"

const owner = RunnerAddress.make({ host: "/run/r2.sock.chunks", port: 0 })
const served: ReadonlyArray<GenerateChunk> = [text([1, 2]), text([3]), done]

/** A route that serves `chunks` for whatever turn it is given. */
const serving = (chunks: ReadonlyArray<GenerateChunk>) => (turn: string) => Stream.fromIterable(chunks).pipe(stamp(turn))

/** Routes that record which were taken, in order. */
const recorded = (routes: {
  readonly owner?: RunnerAddress
  readonly direct?: TurnRoutes["direct"]
  readonly viaCluster?: TurnRoutes["viaCluster"]
}) => {
  const taken: Array<string> = []
  const unused = (route: string) => () => Stream.die(`the ${route} route was taken`)
  const direct = routes.direct ?? unused("direct")
  const viaCluster = routes.viaCluster ?? unused("cluster")
  return {
    taken,
    routes: {
      owner: Effect.succeed(routes.owner),
      direct: (at: RunnerAddress, turn: string, resume: TurnResume | undefined) =>
        Stream.suspend(() => (taken.push("direct"), direct(at, turn, resume))),
      viaCluster: (turn: string, resume: TurnResume | undefined) => Stream.suspend(() => (taken.push("cluster"), viaCluster(turn, resume)))
    } satisfies TurnRoutes
  }
}

const run = (routes: TurnRoutes) => Effect.map(Stream.runCollect(routedTurn("c1", routes)), Chunk.toArray)

describe("the entry's route for a turn", () => {
  it.effect("straight to the owner the loads name; through the entity where none is named", () =>
    Effect.gen(function*() {
      const known = recorded({ owner, direct: (_, turn) => serving(served)(turn) })
      assert.deepStrictEqual(yield* run(known.routes), [...served])
      assert.deepStrictEqual(known.taken, ["direct"])
      const unknown = recorded({ viaCluster: serving(served) })
      assert.deepStrictEqual(yield* run(unknown.routes), [...served])
      assert.deepStrictEqual(unknown.taken, ["cluster"])
    }))

  it.effect("a direct turn refused with NotOwner is served through the entity, whole", () =>
    Effect.gen(function*() {
      const stale = recorded({ owner, direct: () => Stream.fail(new NotOwner({ conversation: "c1" })), viaCluster: serving(served) })
      assert.deepStrictEqual(yield* run(stale.routes), [...served])
      assert.deepStrictEqual(stale.taken, ["direct", "cluster"])
    }))

  it.effect("an owner unreachable before any chunk: through the entity; after chunks: GenerationFailed naming them, not sent again", () =>
    Effect.gen(function*() {
      const unreachable = new SinkUnreachable({ sink: owner.host, reason: "connection refused" })
      const before = recorded({ owner, direct: () => Stream.fail(unreachable), viaCluster: serving(served) })
      assert.deepStrictEqual(yield* run(before.routes), [...served])
      assert.deepStrictEqual(before.taken, ["direct", "cluster"])

      const after = recorded({
        owner,
        direct: (_, turn) => Stream.concat(Stream.fromIterable(served.slice(0, 2)).pipe(stamp(turn)), Stream.fail(unreachable))
      })
      const delivered: Array<GenerateChunk> = []
      const failure = yield* failureOf(Stream.runForEach(routedTurn("c1", after.routes), (c) => Effect.sync(() => delivered.push(c))))
      assert.deepStrictEqual(delivered, served.slice(0, 2))
      assert.strictEqual(failure._tag, "GenerationFailed")
      assert.strictEqual(failure._tag === "GenerationFailed" ? failure.deliveredTokens : -1, 3)
      assert.deepStrictEqual(after.taken, ["direct"])
    }))

  it.effect("a turn whose runner was lost before any chunk is sent again, each time with a new turn id, at most lostTurnRetries times", () =>
    Effect.gen(function*() {
      const lost = Stream.failCause(Cause.interrupt(FiberId.none))
      let attempts = 0
      const turns = new Set<string>()
      const recovers = recorded({
        viaCluster: (turn) => {
          turns.add(turn)
          return ++attempts < 3 ? lost : serving(served)(turn)
        }
      })
      assert.deepStrictEqual(yield* run(recovers.routes), [...served])
      assert.strictEqual(turns.size, 3)

      const never = recorded({ viaCluster: () => lost })
      const failure = yield* failureOf(run(never.routes))
      assert.strictEqual(failure._tag, "EngineUnavailable")
      assert.strictEqual(never.taken.length, lostTurnRetries + 1)
    }))
})

describe("the entry's route for a resumable turn (greedy or seeded)", () => {
  /** The first `count` chunks of `served` stamped for `turn`, then `end` (the runner lost). */
  const cutAfter = <E>(count: number, turn: string, end: Stream.Stream<never, E>) =>
    Stream.concat(Stream.fromIterable(served.slice(0, count)).pipe(stamp(turn)), end)
  /** A runner that runs the turn again from its start and sends on what follows `resume`. */
  const rerun = (turn: string, resume: TurnResume | undefined) => Stream.fromIterable(served).pipe(stampResumed(turn, resume))

  it.effect("lost after chunks (unreachable, connection closed, or restarted by the cluster): resumed through the cluster with what was delivered; the client gets the turn once", () =>
    Effect.gen(function*() {
      const unreachable = new SinkUnreachable({ sink: owner.host, reason: "connection refused" })
      const ends = [
        (turn: string) => cutAfter(2, turn, Stream.fail(unreachable)),
        (turn: string) => cutAfter(2, turn, Stream.failCause(Cause.interrupt(FiberId.none))),
        // The cluster re-sent the same turn to the shard's next owner: chunk 0 again after chunk 1.
        (turn: string) => Stream.concat(cutAfter(2, turn, Stream.empty), Stream.fromIterable(served).pipe(stamp(turn)))
      ]
      for (const end of ends) {
        const resumes: Array<TurnResume | undefined> = []
        const routes = recorded({
          owner,
          direct: (_, turn) => end(turn),
          viaCluster: (turn, resume) => (resumes.push(resume), rerun(turn, resume))
        })
        const out = Chunk.toArray(yield* Stream.runCollect(routedTurn("c1", routes.routes, true)))
        assert.deepStrictEqual(out, [...served])
        assert.deepStrictEqual(routes.taken, ["direct", "cluster"])
        assert.deepStrictEqual(resumes, [{ chunks: 2, tokens: [1, 2, 3] }])
      }
    }))

  it.effect("not resumable (sampled without a seed): lost after chunks, by the connection or a restart, it fails with GenerationFailed naming them, not sent again", () =>
    Effect.gen(function*() {
      const ends = [
        (turn: string) => cutAfter(2, turn, Stream.failCause(Cause.interrupt(FiberId.none))),
        (turn: string) => Stream.concat(cutAfter(2, turn, Stream.empty), Stream.fromIterable(served).pipe(stamp(turn)))
      ]
      for (const end of ends) {
        const delivered: Array<GenerateChunk> = []
        const routes = recorded({ viaCluster: (turn) => end(turn) })
        const failure = yield* failureOf(Stream.runForEach(routedTurn("c1", routes.routes, false), (c) => Effect.sync(() => delivered.push(c))))
        assert.deepStrictEqual(delivered, served.slice(0, 2))
        assert.strictEqual(failure._tag, "GenerationFailed")
        assert.strictEqual(failure._tag === "GenerationFailed" ? failure.deliveredTokens : -1, 3)
        assert.include(failure._tag === "GenerationFailed" ? failure.reason : "", "not re-run")
        assert.deepStrictEqual(routes.taken, ["cluster"])
      }
    }))

  it.effect("a direct turn refused (NotOwner), then lost after chunks through the entity, is resumed there; a resumed turn restarted by the cluster resumes again", () =>
    Effect.gen(function*() {
      const resumes: Array<TurnResume | undefined> = []
      const routes = recorded({
        owner,
        direct: () => Stream.fail(new NotOwner({ conversation: "c1" })),
        viaCluster: (turn, resume) => {
          resumes.push(resume)
          // First try: one chunk, then lost. The resumed try: its next chunk, then the cluster
          // starts it again from where it resumed (chunk 1). The third: the rest.
          if (resume === undefined) return cutAfter(1, turn, Stream.failCause(Cause.interrupt(FiberId.none)))
          if (resumes.length === 2) return Stream.concat(rerun(turn, resume).pipe(Stream.take(1)), rerun(turn, resume))
          return rerun(turn, resume)
        }
      })
      assert.deepStrictEqual(Chunk.toArray(yield* Stream.runCollect(routedTurn("c1", routes.routes, true))), [...served])
      assert.deepStrictEqual(routes.taken, ["direct", "cluster", "cluster", "cluster"])
      assert.deepStrictEqual(resumes, [undefined, { chunks: 1, tokens: [1, 2] }, { chunks: 2, tokens: [1, 2, 3] }])
    }))

  it.effect("a resumed runner's own GenerationFailed names the tokens the client has, not its re-run's", () =>
    Effect.gen(function*() {
      const routes = recorded({
        viaCluster: (turn, resume) =>
          resume === undefined
            ? cutAfter(2, turn, Stream.failCause(Cause.interrupt(FiberId.none)))
            // The re-run's engine fails while it repeats the delivered tokens (it counts its own 2).
            : Stream.fail(new GenerationFailed({ deliveredTokens: 2, reason: "the engine child exited" }))
      })
      const failure = yield* failureOf(Stream.runDrain(routedTurn("c1", routes.routes, true)))
      assert.strictEqual(failure._tag, "GenerationFailed")
      assert.strictEqual(failure._tag === "GenerationFailed" ? failure.deliveredTokens : -1, 3)
    }))

  it("which turns resume: greedy (the default) or seeded, not sampled without a seed", () => {
    const ask = { messages: [{ role: "user" as const, content: "hi" }] }
    assert.isTrue(resumable(ask))
    assert.isTrue(resumable({ ...ask, sampling: { temperature: 0 } }))
    assert.isTrue(resumable({ ...ask, sampling: { temperature: 0.8, seed: 3 } }))
    assert.isFalse(resumable({ ...ask, sampling: { temperature: 0.8 } }))
  })

  it.effect("a resumed turn lost again resumes from everything delivered so far; after lostTurnRetries resumptions, GenerationFailed", () =>
    Effect.gen(function*() {
      const lostAgain = Stream.failCause(Cause.interrupt(FiberId.none))
      const resumes: Array<TurnResume | undefined> = []
      // Each try delivers one more chunk, then its runner is lost.
      const oneMore = recorded({
        viaCluster: (turn, resume) => {
          resumes.push(resume)
          const from = resume?.chunks ?? 0
          return from >= 2 ? rerun(turn, resume) : Stream.concat(rerun(turn, resume).pipe(Stream.take(1)), lostAgain)
        }
      })
      assert.deepStrictEqual(Chunk.toArray(yield* Stream.runCollect(routedTurn("c1", oneMore.routes, true))), [...served])
      assert.deepStrictEqual(resumes, [undefined, { chunks: 1, tokens: [1, 2] }, { chunks: 2, tokens: [1, 2, 3] }])

      const delivered: Array<GenerateChunk> = []
      const always = recorded({ viaCluster: (turn, resume) => resume === undefined ? cutAfter(1, turn, lostAgain) : Stream.concat(Stream.empty, lostAgain) })
      const failure = yield* failureOf(Stream.runForEach(routedTurn("c1", always.routes, true), (c) => Effect.sync(() => delivered.push(c))))
      assert.deepStrictEqual(delivered, served.slice(0, 1))
      assert.strictEqual(failure._tag, "GenerationFailed")
      assert.strictEqual(failure._tag === "GenerationFailed" ? failure.deliveredTokens : -1, 2)
      assert.strictEqual(always.taken.length, lostTurnRetries + 1)
    }))
})

describe("the entry's route for a decision", () => {
  const answer = { heads: [] }
  /** A route that records being taken and answers with `effect`. */
  const route = <A, E>(taken: Array<string>, name: string, effect: Effect.Effect<A, E>) => Effect.suspend(() => (taken.push(name), effect))

  it.effect("straight to its runner; through the cluster where none is named, where it refuses or where its sink cannot be reached", () =>
    Effect.gen(function*() {
      const taken: Array<string> = []
      const viaCluster = route(taken, "cluster", Effect.succeed({ heads: [{ labels: [] }] }))
      assert.deepStrictEqual(yield* routedDecision(route(taken, "direct", Effect.succeed(answer)), viaCluster), answer)
      assert.deepStrictEqual(taken.splice(0), ["direct"])
      assert.deepStrictEqual(yield* routedDecision(undefined, viaCluster), { heads: [{ labels: [] }] })
      assert.deepStrictEqual(taken.splice(0), ["cluster"])
      for (const refused of [new NotOwner({}), new SinkUnreachable({ sink: owner.host, reason: "connection refused" })]) {
        assert.deepStrictEqual(yield* routedDecision(route(taken, "direct", Effect.fail(refused)), viaCluster), { heads: [{ labels: [] }] })
        assert.deepStrictEqual(taken.splice(0), ["direct", "cluster"], refused._tag)
      }
    }))

  it.effect("a decision its runner fails (a refused request, the engine's error) fails, and is not sent again", () =>
    Effect.gen(function*() {
      const taken: Array<string> = []
      const invalid = new InvalidRequest({ field: "heads", value: "0", reason: "a decision needs a head" })
      const failure = yield* Effect.flip(routedDecision(route(taken, "direct", Effect.fail(invalid)), route(taken, "cluster", Effect.succeed(answer))))
      assert.strictEqual(failure, invalid)
      assert.deepStrictEqual(taken, ["direct"])
    }))
})
