/**
 * A development check (docs/cluster.md, "Health"): does a turn streaming in a shard that moves to
 * a joining runner end whole? Two runners (SQLite storage, Unix sockets, qwen-chat); a long turn
 * of a conversation that r2 holds now and that a third runner's arrival moves to r3; r3 is started
 * and the turn sent through r1 once r3 is registered. Prints how the turn ended and when.
 * Run: `NATIVEGEN_MODEL_CACHE=.cache/models node --import tsx bench/_join-turn.ts`.
 */
import { RunnerAddress } from "@effect/cluster/RunnerAddress"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Schedule from "effect/Schedule"
import * as Stream from "effect/Stream"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Load from "../src/cluster/Load.js"
import * as Runner from "../src/cluster/Runner.js"
import * as Status from "../src/cluster/Status.js"
import * as Client from "../src/rpc/Client.js"
import { Provider } from "../src/services/Provider.js"
import { clusterStorage, serve, settled } from "./_cluster.js"

const SHARDS = 6

const main = Effect.gen(function*() {
  const dir = yield* Effect.acquireRelease(
    Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "ngj-"))),
    (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
  )
  const { arg: storage, spec } = yield* clusterStorage(dir, "join")
  const sock = (n: string) => Path.join(dir, `${n}.sock`)
  const r1 = yield* serve(dir, "r1", { address: sock("r1"), storage, shards: SHARDS })
  const r2 = yield* serve(dir, "r2", { address: sock("r2"), storage, shards: SHARDS })
  const provider = Context.get(yield* Layer.build(Client.layer({ socketPath: r1.socket })), Provider)
  const view = yield* Layer.build(Runner.layerClientOnly({ storage: spec, shards: SHARDS }))
  const before = yield* settled([r1.stored!, r2.stored!], SHARDS).pipe(Effect.provide(view))
  const three = Load.assignments(
    ["r1", "r2", "r3"].map((n) => [{ address: RunnerAddress.make({ host: sock(n), port: 0 }), groups: ["default"], weight: 1 }, true] as const),
    "default",
    SHARDS
  )!
  let conversation: string | undefined
  for (let i = 0; conversation === undefined && i < 10_000; i++) {
    const id = `join-${i}`
    const shard = Number((yield* Status.shardOf(id).pipe(Effect.provide(view))).split(":").at(-1))
    if ((yield* Status.ownerOf(before, id).pipe(Effect.provide(view))) === r2.stored && three[shard - 1]?.host === sock("r3")) conversation = id
  }
  if (conversation === undefined) return yield* Effect.dieMessage("no conversation moving from r2 to r3")
  console.log(`conversation ${conversation}: on r2 now, on r3 once r3 joins`)
  const r3 = yield* Effect.fork(serve(dir, "r3", { address: sock("r3"), storage, shards: SHARDS }))
  // Registered: r3 is among the runners in the storage.
  yield* Effect.flatMap(Status.snapshot, (s) =>
    s.runners.some((r) => r.address === `${sock("r3")}:0`) ? Effect.void : Effect.fail("not yet")).pipe(
      Effect.retry(Schedule.spaced("100 millis")),
      Effect.provide(view)
    )
  const start = performance.now()
  console.log("r3 registered; the turn starts")
  let tokens = 0
  let first = 0
  // When the conversation's shard lock moves to r3 (polled every 100 ms while the turn runs).
  const target = conversation
  yield* Effect.flatMap(Status.snapshot, (s) => Effect.flatMap(Status.ownerOf(s, target), (owner) =>
    owner === `${sock("r3")}:0`
      ? Effect.sync(() => console.log(`the shard is locked by r3 at ${Math.round(performance.now() - start)} ms, after ${tokens} tokens`))
      : Effect.fail("not yet"))).pipe(
      Effect.retry(Schedule.spaced("100 millis")),
      Effect.provide(view),
      Effect.forkScoped
    )
  const ended = yield* provider.generate({
    messages: [{ role: "user", content: "tell me a very long story" }],
    conversation,
    maxTokens: 1900,
    sampling: { temperature: 50, topK: 0, topP: 1, seed: 1 },
    thinking: false
  }).pipe(
    Stream.runForEach((c) =>
      Effect.sync(() => {
        if (c._tag === "Text") {
          if (tokens === 0) first = performance.now() - start
          tokens += c.tokens.length
        }
      })
    ),
    Effect.either
  )
  const ms = Math.round(performance.now() - start)
  console.log(`turn ended after ${ms} ms (first token ${Math.round(first)} ms), ${tokens} tokens: ${ended._tag === "Right" ? "whole" : JSON.stringify(ended.left)}`)
  const after = yield* settled([r1.stored!, r2.stored!, sock("r3") + ":0"], SHARDS).pipe(Effect.provide(view))
  console.log(`the conversation's shard is now on ${yield* Status.ownerOf(after, conversation).pipe(Effect.provide(view))}`)
  yield* Fiber.join(r3)
})

Effect.runPromise(Effect.scoped(main)).then(() => process.exit(0), (error) => {
  console.error(error)
  process.exit(1)
})
