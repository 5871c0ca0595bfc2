/**
 * A turn streaming in a shard that moves to a joining runner ends whole (real processes, Unix
 * sockets, one SQLite storage). r1 and r2 serve; a long turn of a conversation that one of them
 * holds, and that r3's arrival moves to r3, is sent through the other, and once its first chunk
 * came r3 is started; the test checks that r3 registered while the turn still streamed (so the
 * old owner learned at its next assignment refresh, mid-turn, that the shard goes to r3). The old
 * owner serves it while the shard moves: its chunks go straight to the entry (ChunkChannel), and
 * it gives the shard up only once the turn has ended. With the turn streamed as the entity's
 * reply, the entity closed as the shard moved, its stream acks were dropped, and the turn stalled
 * and was cut with GenerationFailed after the 30 s termination timeout.
 */
import { RunnerAddress } from "@effect/cluster/RunnerAddress"
import { assert, describe, layer } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as Stream from "effect/Stream"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Load from "../../src/cluster/Load.js"
import * as Status from "../../src/cluster/Status.js"
import { clusterEnv, generationsOf, type RunnerProcess, settled, startRunner, viewLayer } from "./membership-support.js"
import { doneOf, tokensOf } from "../support/generation.js"

const SHARDS = 6
/**
 * The turn's length: long enough to outlast r3's start (here r3 registered ~6.8 s after the turn
 * began, and 900 tokens took 9.1 s), in a context raised to hold it.
 */
const TOKENS = 1600
const CONTEXT = 2048

class Dir extends Context.Tag("test/JoinDir")<Dir, string>() {}

const view = Layer.unwrapScoped(Effect.gen(function*() {
  const dir = yield* Effect.acquireRelease(
    Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "ngj-"))),
    (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
  )
  return viewLayer({ _tag: "Sqlite", file: Path.join(dir, "cluster.db") }, SHARDS).pipe(Layer.merge(Layer.succeed(Dir, dir)))
}))

describe("a runner joins", () => {
  layer(view, { timeout: 400_000, excludeTestServices: true })("three runners", (it) => {
    it.scoped("a turn streaming in a shard that moves to the joining runner ends whole, served by its old owner", () =>
      Effect.gen(function*() {
        const dir = yield* Dir
        const env = clusterEnv(Path.join(dir, "cluster.db"), SHARDS, { NATIVEGEN_ADMISSION_GENERATION_CONTEXT_CAP: String(CONTEXT) })
        const r1 = yield* startRunner(dir, "r1", env)
        const r2 = yield* startRunner(dir, "r2", env)
        const before = yield* settled([r1, r2], SHARDS)
        // A conversation on r1 or r2 now that the assignment over three runners gives to r3 (which of
        // the two gives r3 shards depends on the hash of the socket paths).
        const socket = (name: string) => Path.join(dir, `${name}.sock`)
        const three = Load.assignments(
          ["r1", "r2", "r3"].map((n) => [{ address: RunnerAddress.make({ host: socket(n), port: 0 }), groups: ["default"], weight: 1 }, true] as const),
          "default",
          SHARDS
        )!
        let moving: { readonly conversation: string; readonly owner: RunnerProcess; readonly entry: RunnerProcess } | undefined
        for (let i = 0; moving === undefined && i < 10_000; i++) {
          const id = `join-${i}`
          const shard = Number((yield* Status.shardOf(id)).split(":").at(-1))
          if (three[shard - 1]?.host !== socket("r3")) continue
          const owner = (yield* Status.ownerOf(before, id)) === r1.stored ? r1 : r2
          moving = { conversation: id, owner, entry: owner === r1 ? r2 : r1 }
        }
        assert.isDefined(moving, "a conversation that moves to r3")
        const { conversation, entry, owner } = moving!

        // The turn is sent first and r3 started once its first chunk came, so the old owner serves it
        // (sent the other way round, a loaded machine could let the shard move to r3 before the
        // turn reached its owner: r3 then served it).
        const ownerBefore = yield* generationsOf(owner)
        const started = performance.now()
        const firstChunk = yield* Deferred.make<void>()
        const turn = yield* entry.provider.generate({
          messages: [{ role: "user", content: "tell me a very long story" }],
          conversation,
          maxTokens: TOKENS,
          // Sampled hot over the whole vocabulary: its end of turn is as unlikely as any token.
          sampling: { temperature: 50, topK: 0, topP: 1, seed: 1 },
          thinking: false
        }).pipe(
          Stream.tap(() => Deferred.succeed(firstChunk, undefined)),
          Stream.runCollect,
          Effect.map(Chunk.toArray),
          Effect.either,
          Effect.fork
        )
        // A turn refused or failed at once ends here too (and fails below).
        yield* Effect.raceFirst(Deferred.await(firstChunk), Fiber.await(turn))
        const r3 = yield* Effect.fork(startRunner(dir, "r3", env))
        yield* Effect.flatMap(Status.snapshot, (s) => s.runners.some((r) => r.address === `${socket("r3")}:0`) ? Effect.void : Effect.fail("not yet")).pipe(
          Effect.retry(Schedule.spaced("50 millis"))
        )
        const registeredAt = Math.round(performance.now() - started)
        assert.isTrue(
          Option.isNone(yield* Fiber.poll(turn)),
          `r3 registered ${registeredAt} ms after the turn began, when it had already ended: the turn is too short to see the shard move`
        )
        const ended = yield* Fiber.join(turn)
        const millis = Math.round(performance.now() - started)
        assert.strictEqual(ended._tag, "Right", `the turn: ${JSON.stringify(ended)}`)
        if (ended._tag === "Right") {
          assert.strictEqual(tokensOf(ended.right).length, TOKENS)
          assert.strictEqual(doneOf(ended.right).usage.generatedTokens, TOKENS)
        }
        assert.strictEqual(yield* generationsOf(owner), ownerBefore + 1, `${owner.name}, the old owner, served the turn`)
        const joined = yield* Fiber.join(r3)
        const after = yield* settled([r1, r2, joined], SHARDS)
        assert.strictEqual(yield* Status.ownerOf(after, conversation), joined.stored, "the shard moved to r3")
        console.log(
          `join: the turn of ${TOKENS} tokens, sent through ${entry.name}, ended whole after ${millis} ms; r3 registered at ` +
            `${registeredAt} ms, and the shard moved from ${owner.name} to r3`
        )
      }), { timeout: 180_000 })
  })
})
