/**
 * Turns run on an active conversation entity in process (ActiveConversations: what a turn sent
 * straight to its owner does, DirectServer.ts), beside turns Sharding delivers: the entity (the
 * real ConversationEntity handlers, in @effect/cluster's test client) over a Provider whose
 * generations wait on a gate each, so the test decides when each ends. Its turns run one at a
 * time whichever way they came; when it closes it leaves the registry at once, hands its KV over
 * only after the turn it runs has ended, and refuses a turn that reaches it after that. A
 * conversation busy with turns in process still shows Sharding a turn often enough that it is not
 * closed as idle.
 */
import { RunnerAddress } from "@effect/cluster/RunnerAddress"
import * as Entity from "@effect/cluster/Entity"
import * as ShardingConfig from "@effect/cluster/ShardingConfig"
import { assert, describe, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FiberId from "effect/FiberId"
import * as Layer from "effect/Layer"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as TestClock from "effect/TestClock"
import * as ActiveConversations from "../../src/cluster/ActiveConversations.js"
import { SinkClients } from "../../src/cluster/ChunkChannel.js"
import * as ConversationEntity from "../../src/cluster/ConversationEntity.js"
import * as Drain from "../../src/cluster/Drain.js"
import { Placement } from "../../src/cluster/Placement.js"
import { Transcripts } from "../../src/cluster/Transcripts.js"
import type { GenerateChunk, GenerateRequest } from "../../src/domain/Inference.js"
import { Conversations } from "../../src/services/Conversations.js"
import { Provider } from "../../src/services/Provider.js"

const answer: ReadonlyArray<GenerateChunk> = [
  { _tag: "Text", channel: "answer", text: " hi", tokens: [7] },
  {
    _tag: "Done",
    stopReason: "maxTokens",
    usage: { promptTokens: 3, reusedTokens: 0, generatedTokens: 1, reuse: "cold" },
    timings: { queueMillis: 0, firstTokenMillis: 0, decodeTokensPerSecond: 0, totalMillis: 0 }
  }
]

const sink = RunnerAddress.make({ host: "/run/entry.sock.chunks", port: 0 })
const payload = (name: string) => ({ turn: name, request: { messages: [{ role: "user", content: name }] } satisfies GenerateRequest, sink })

/** What the entity did, in order (`start:NAME`, `end:NAME`, `handOver:ID`), and a gate per turn that ends its generation. */
const makeWorld = Effect.sync(() => {
  const events: Array<string> = []
  const gates = new Map<string, Deferred.Deferred<void>>()
  const gate = (name: string) => {
    let g = gates.get(name)
    if (g === undefined) gates.set(name, g = Deferred.unsafeMake<void>(FiberId.none))
    return g
  }
  const unused = () => Effect.die("not used by this test")
  const provider = Provider.of({
    generate: (request) =>
      Stream.unwrap(Effect.gen(function*() {
        const name = request.messages[0]!.content
        events.push(`start:${name}`)
        yield* Deferred.await(gate(name))
        return Stream.fromIterable(answer).pipe(Stream.ensuring(Effect.sync(() => void events.push(`end:${name}`))))
      })),
    decide: unused,
    count: unused,
    tokenize: unused,
    prepare: unused,
    readiness: Effect.die("not used by this test"),
    readinessChanges: Stream.die("not used by this test")
  })
  const services = Layer.mergeAll(
    Layer.succeed(Provider, provider),
    Layer.succeed(Placement, Placement.of({ record: () => Effect.void })),
    Layer.succeed(Transcripts, Transcripts.of({ record: () => Effect.void, lookup: () => Effect.succeed(undefined) })),
    Layer.succeed(Conversations, Conversations.of({
      verify: unused,
      attach: unused,
      record: unused,
      recordPrepared: unused,
      held: () => undefined,
      handOver: (conversation) => Effect.sync(() => void events.push(`handOver:${conversation}`))
    })),
    Layer.succeed(SinkClients, SinkClients.of({
      inProcess: () => true,
      push: () => Effect.succeed(true),
      serve: unused,
      serveOneOff: unused,
      serveDecision: unused
    })),
    Drain.layer("1 second")
  )
  return { events, gate, services }
})

/** Until `done()` holds, letting the other fibers run (all in process: no time passes, nothing is waited for outside). */
const until = (done: () => boolean) =>
  Effect.gen(function*() {
    for (let i = 0; i < 1_000 && !done(); i++) yield* Effect.yieldNow()
    assert.isTrue(done(), "the condition never held")
  })

/** Lets every other fiber run as far as it can. */
const settle = Effect.repeatN(Effect.yieldNow(), 200)

describe("turns on an active conversation entity", () => {
  it.scoped("run one at a time with the turns Sharding delivers; a closing entity leaves the registry, hands over after its turn, and refuses later ones", () =>
    Effect.gen(function*() {
      const { events, gate, services } = yield* makeWorld
      const active = yield* ActiveConversations.ActiveConversations
      const entityScope = yield* Scope.make()
      const clientFor = yield* Entity.makeTestClient(ConversationEntity.Conversation, ConversationEntity.layer().pipe(Layer.provide(services))).pipe(
        Effect.provide(ShardingConfig.layer({ shardsPerGroup: 4 })),
        Scope.extend(entityScope)
      )
      const client = yield* clientFor("c1").pipe(Scope.extend(entityScope))
      yield* Deferred.succeed(gate("first"), undefined)
      yield* client.Turn(payload("first"))
      const onEntity = active.lookup("c1")
      assert.isDefined(onEntity, "registered once the entity started")

      // A turn on the entity in process holds it; one Sharding delivers meanwhile waits for it.
      const direct = yield* Effect.fork(onEntity!(payload("direct")))
      yield* until(() => events.includes("start:direct"))
      const delivered = yield* Effect.fork(client.Turn(payload("delivered")))
      yield* settle
      assert.notInclude(events, "start:delivered", "waits for the turn on the entity")
      yield* Deferred.succeed(gate("direct"), undefined)
      assert.deepStrictEqual(yield* Fiber.join(direct), { chunks: 2 })
      yield* Deferred.succeed(gate("delivered"), undefined)
      assert.deepStrictEqual(yield* Fiber.join(delivered), { chunks: 2 })
      // And the other way round.
      const deliveredFirst = yield* Effect.fork(client.Turn(payload("delivered-first")))
      yield* until(() => events.includes("start:delivered-first"))
      const directAfter = yield* Effect.fork(onEntity!(payload("direct-after")))
      yield* settle
      assert.notInclude(events, "start:direct-after", "waits for the turn Sharding delivered")
      yield* Deferred.succeed(gate("delivered-first"), undefined)
      yield* Deferred.succeed(gate("direct-after"), undefined)
      yield* Fiber.join(deliveredFirst)
      yield* Fiber.join(directAfter)

      // Closing while a turn runs on the entity: it leaves the registry at once, and hands over after the turn.
      const last = yield* Effect.fork(onEntity!(payload("last")))
      yield* until(() => events.includes("start:last"))
      const closing = yield* Effect.fork(Scope.close(entityScope, Exit.void))
      yield* until(() => active.lookup("c1") === undefined)
      yield* settle
      assert.notInclude(events, "handOver:c1", "the hand-over waits for the turn in flight")
      yield* Deferred.succeed(gate("last"), undefined)
      assert.deepStrictEqual(yield* Fiber.join(last), { chunks: 2 })
      yield* Fiber.join(closing)
      // A turn that reaches the closed entity (its caller looked it up before the close) is refused.
      yield* Deferred.succeed(gate("late"), undefined)
      const refused = yield* Effect.flip(onEntity!(payload("late")))
      assert.strictEqual(refused._tag, "NotOwner")

      assert.deepStrictEqual(events, [
        "start:first", "end:first",
        "start:direct", "end:direct",
        "start:delivered", "end:delivered",
        "start:delivered-first", "end:delivered-first",
        "start:direct-after", "end:direct-after",
        "start:last", "end:last",
        "handOver:c1"
      ])
    }).pipe(Effect.provide(ActiveConversations.layer)))

  it.scoped("a conversation busy with turns in process keeps its entity: once half its idle time has passed since Sharding delivered one, the next goes through Sharding", () =>
    Effect.gen(function*() {
      const { gate, services } = yield* makeWorld
      const active = yield* ActiveConversations.ActiveConversations
      const clientFor = yield* Entity.makeTestClient(
        ConversationEntity.Conversation,
        ConversationEntity.layer({ maxIdleTime: "10 minutes" }).pipe(Layer.provide(services))
      ).pipe(Effect.provide(ShardingConfig.layer({ shardsPerGroup: 4 })))
      const client = yield* clientFor("c1")
      // As a direct turn goes (RoutingProvider.entityTurns): on the entity in process where it takes one, else through Sharding.
      const ways: Array<string> = []
      const turn = (name: string) =>
        Effect.gen(function*() {
          yield* Deferred.succeed(gate(name), undefined)
          const onEntity = active.lookup("c1")
          ways.push(onEntity === undefined ? "sharding" : "in process")
          yield* onEntity === undefined ? client.Turn(payload(name)) : onEntity(payload(name))
        })
      yield* turn("t0")
      // A turn every 2 minutes for half an hour. (The test client does not reap idle entities;
      // Sharding's reaper closes one whose last delivered message ended maxIdleTime ago, so a turn
      // through it at least every half of that keeps the entity.)
      for (let i = 1; i <= 15; i++) {
        yield* TestClock.adjust("2 minutes")
        yield* settle
        yield* turn(`t${i}`)
      }
      // The entity started with the test client (at 0); through Sharding at 6, 12, ... minutes: the
      // first turn 5 minutes or more after the entity started, or after the last turn Sharding delivered.
      assert.deepStrictEqual(ways, Array.from({ length: 16 }, (_, i) => (i > 0 && i % 3 === 0 ? "sharding" : "in process")))
    }).pipe(Effect.provide(ActiveConversations.layer)))
})
