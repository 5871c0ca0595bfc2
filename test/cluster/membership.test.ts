/**
 * Runners joining and leaving a running cluster (real processes, Unix sockets, one SQLite
 * storage, one shared directory of conversation state files). r1 and r2 serve while one-offs
 * flow through r1; r3 joins: the shards rebalance over three runners with no request failing,
 * and a new conversation in one of r3's shards is served by r3. Then r2 is drained (SIGTERM)
 * while a turn of one of its conversations streams: the turn ends whole, r2 exits within the
 * bound, its shards move, and the next turn of a conversation r2 served continues on its new
 * owner from the state file r2 saved (reuse `restored`), with the same tokens as one runtime.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Ref from "effect/Ref"
import * as Stream from "effect/Stream"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Status from "../../src/cluster/Status.js"
import type { ChatMessage, GenerateChunk, GenerateRequest } from "../../src/domain/Inference.js"
import { clusterEnv, generationsOf, newestGeneration, type RunnerProcess, settled, startRunner, viewLayer } from "./membership-support.js"
import { answerOf, collectFrom, doneOf, tokensOf } from "../support/generation.js"

const SHARDS = 6

class Cluster extends Context.Tag("test/Cluster")<Cluster, {
  readonly dir: string
  readonly env: Record<string, string>
  readonly r1: RunnerProcess
  readonly r2: RunnerProcess
}>() {}

const clusterLayer = Layer.unwrapScoped(Effect.gen(function*() {
  const dir = yield* Effect.acquireRelease(
    Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "ngm-"))),
    (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
  )
  const storage = Path.join(dir, "cluster.db")
  const view = yield* Layer.build(viewLayer({ _tag: "Sqlite", file: storage }, SHARDS))
  const env = clusterEnv(storage, SHARDS, { NATIVEGEN_CLUSTER_CONVERSATIONS: Path.join(dir, "conversations") })
  // One after the other: SQLite runner storage can stall when runners start at the same moment (docs/cluster.md).
  const r1 = yield* startRunner(dir, "r1", env)
  const r2 = yield* startRunner(dir, "r2", env)
  return Layer.merge(Layer.succeed(Cluster, { dir, env, r1, r2 }), Layer.succeedContext(view))
}))

const settings = { maxTokens: 8, sampling: { temperature: 0 }, thinking: false } as const

/** A conversation id whose shard `owner` holds in `snapshot`. */
const ownedBy = (snapshot: Status.ClusterSnapshot, owner: RunnerProcess, tag: string) =>
  Effect.gen(function*() {
    for (let i = 0; i < 10_000; i++) {
      const id = `${tag}-${i}`
      if ((yield* Status.ownerOf(snapshot, id)) === owner.stored) return id
    }
    return assert.fail(`no conversation id in ${owner.name}'s shards`)
  })

/**
 * The first turn of a conversation that `runner` serves (sent through the first of `runners`): an id in its
 * shards by a settled read, tried again with another id if another runner served it. A settled
 * read can be a step of a rebalancing still under way (a runner that has not yet seen the last
 * join keeps its shards for a refresh or two), so the shard may move before the turn is sent.
 */
const firstTurnOn = (runner: RunnerProcess, runners: ReadonlyArray<RunnerProcess>, tag: string, request: Omit<GenerateRequest, "conversation">) =>
  Effect.gen(function*() {
    for (let attempt = 0; attempt < 5; attempt++) {
      const conversation = yield* ownedBy(yield* settled(runners, SHARDS), runner, `${tag}-${attempt}`)
      const chunks = yield* collectFrom(runners[0]!.provider, { ...request, conversation })
      const newest = yield* newestGeneration(runner)
      const { timings } = doneOf(chunks)
      if (newest?.totalMillis === timings.totalMillis && newest.firstTokenMillis === timings.firstTokenMillis) return { conversation, chunks }
      yield* Effect.logInfo(`membership: ${conversation} was not served by ${runner.name} (its shard moved); another`)
    }
    return assert.fail(`no conversation served by ${runner.name} in 5 tries`)
  })

const follow = (first: ReadonlyArray<GenerateChunk>, user1: ChatMessage, conversation: string): GenerateRequest => ({
  messages: [user1, { role: "assistant", content: answerOf(first) }, { role: "user", content: "and then?" }],
  conversation,
  checkpoint: doneOf(first).checkpoint!,
  ...settings
})

describe("membership", () => {
  layer(clusterLayer, { timeout: 500_000, excludeTestServices: true })("a cluster that grows and drains", (it) => {
    it.scoped("a runner added under traffic takes new conversations; a runner drained mid-turn loses nothing and its conversations continue from their saved KV", () =>
      Effect.gen(function*() {
        const { dir, env, r1, r2 } = yield* Cluster
        yield* settled([r1, r2], SHARDS)

        // Traffic through r1 while r3 joins: one-offs one after another; every one must succeed.
        const served = yield* Ref.make(0)
        const traffic = yield* Effect.forever(
          Effect.zipRight(collectFrom(r1.provider, { messages: [{ role: "user", content: "hello" }], ...settings }), Ref.update(served, (n) => n + 1))
        ).pipe(Effect.fork)
        const r3 = yield* startRunner(dir, "r3", env)
        yield* Effect.logInfo("membership: r3 ready")
        const withR3 = yield* settled([r1, r2, r3], SHARDS)
        yield* Effect.logInfo("membership: settled over r1, r2, r3")
        assert.isUndefined(traffic.unsafePoll() ?? undefined, "the traffic never failed")
        yield* Fiber.interrupt(traffic)
        assert.isAbove(yield* Ref.get(served), 0)

        // A new conversation in one of r3's shards, sent through r1, is served by r3.
        const onR3 = yield* ownedBy(withR3, r3, "joined")
        const r3Before = yield* generationsOf(r3)
        const joined = yield* collectFrom(r1.provider, { messages: [{ role: "user", content: "hi there" }], conversation: onR3, ...settings })
        assert.strictEqual(doneOf(joined).stopReason.length > 0, true)
        assert.strictEqual(yield* generationsOf(r3), r3Before + 1, "r3 served the new conversation")

        // Two conversations on r2: A has had a turn; B's turn streams when r2 is told to drain.
        const userA: ChatMessage = { role: "user", content: "where is the ship" }
        const { chunks: firstA, conversation: a } = yield* firstTurnOn(r2, [r1, r2, r3], "drained-a", { messages: [userA], ...settings })
        const b = yield* ownedBy(yield* settled([r1, r2, r3], SHARDS), r2, "drained-b")
        // The same two turns on one runtime alone (a conversation r1 owns), for the tokens.
        const alone = yield* ownedBy(withR3, r1, "alone")
        const firstAlone = yield* collectFrom(r1.provider, { messages: [userA], conversation: alone, ...settings })
        const secondAlone = yield* collectFrom(r1.provider, follow(firstAlone, userA, alone))

        const started = yield* Effect.makeLatch(false)
        // Sampled hot over the whole vocabulary, so that its end of turn is as unlikely as any token:
        // it runs its 48 tokens, well past the signal.
        const turnB = yield* r1.provider.generate({
          messages: [{ role: "user", content: "tell me a long story" }],
          conversation: b,
          maxTokens: 48,
          sampling: { temperature: 50, topK: 0, topP: 1, seed: 1 },
          thinking: false
        }).pipe(
          Stream.tap(() => started.open),
          Stream.runCollect,
          Effect.map(Chunk.toArray),
          Effect.either,
          Effect.fork
        )
        yield* started.await
        assert.isNull(turnB.unsafePoll(), "B is still streaming when r2 is told to drain")
        yield* Effect.logInfo("membership: B streams; SIGTERM to r2")
        const drainStart = Date.now()
        yield* r2.signal("SIGTERM")
        const exit = yield* r2.exited
        const drainMillis = Date.now() - drainStart
        assert.strictEqual(exit.code, 0, `r2 exited ${JSON.stringify(exit)}:\n${r2.log().slice(-3000)}`)
        assert.isBelow(drainMillis, 40_000, "r2 drained within the bound")
        yield* Effect.logInfo(`membership: r2 exited after ${drainMillis} ms`)
        const b1 = yield* Fiber.join(turnB)
        assert.strictEqual(b1._tag, "Right", `the turn in flight: ${JSON.stringify(b1)}`)
        if (b1._tag === "Right") assert.strictEqual(doneOf(b1.right).usage.generatedTokens, tokensOf(b1.right).length)

        // r2's shards moved to r1 and r3; A's next turn continues there from r2's state file.
        const after = yield* settled([r1, r3], SHARDS)
        const newOwner = (yield* Status.ownerOf(after, a)) === r1.stored ? r1 : r3
        const before = yield* newestGeneration(newOwner)
        const secondA = yield* collectFrom(r1.provider, follow(firstA, userA, a))
        const newest = yield* newestGeneration(newOwner)
        assert.notDeepEqual(newest, before, `served by the new owner ${newOwner.name}`)
        assert.strictEqual(newest?.reuse, "restored", `served by the new owner ${newOwner.name}`)
        assert.strictEqual(doneOf(secondA).usage.reuse, "restored")
        assert.deepStrictEqual(tokensOf(firstA), tokensOf(firstAlone))
        assert.deepStrictEqual(tokensOf(secondA), tokensOf(secondAlone))
        console.log(`drain: r2 exited ${drainMillis} ms after SIGTERM; ${yield* Ref.get(served)} one-offs served while r3 joined`)
      }).pipe(
        // Within the test's own timeout, so that a run that stalls leaves the runners' logs.
        Effect.timeoutFail({ duration: "380 seconds", onTimeout: () => "the test ran past 380 s" }),
        Effect.tapErrorCause(() =>
          Effect.flatMap(Cluster, ({ r1, r2 }) => Effect.sync(() => Fs.writeFileSync("/tmp/drain-membership-runners.log", `r1:\n${r1.log()}\nr2:\n${r2.log()}`)))
        )
      ), 400_000)
  })
})
