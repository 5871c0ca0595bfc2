/**
 * Three `nativegen serve --cluster` processes on this machine (Unix sockets, one SQLite runner
 * storage, qwen-chat with one thread and small contexts), and clients on their public sockets as
 * on a single server. Conversations are placed by their shard: the test reads the shard locks
 * from the storage (a client-only Sharding computes each conversation's shard) and picks
 * conversations owned by each runner. Each turn is sent through a runner that does not own it,
 * lands on the owner (its readiness counts the generation), a follow-up turn reuses the owner's
 * KV (`continuation`), and the tokens equal those of the same turns served by one runtime alone
 * (a twin conversation owned by the entry runner itself: no hop). `nativegen cluster status`
 * then shows the three runners, the shards each holds and where each conversation was served.
 * A conversation prepared through one runner is prepared on its owner.
 */
import { loadOf } from "./membership-support.js"
import { shardLocks } from "./settle.js"
import { assert, describe, layer } from "@effect/vitest"
import * as NodeSocket from "@effect/platform-node/NodeSocket"
import { Socket } from "@effect/platform/Socket"
import * as RpcClient from "@effect/rpc/RpcClient"
import * as RpcSerialization from "@effect/rpc/RpcSerialization"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as ChunkChannel from "../../src/cluster/ChunkChannel.js"
import * as Runner from "../../src/cluster/Runner.js"
import * as Status from "../../src/cluster/Status.js"
import * as Storage from "../../src/cluster/Storage.js"
import * as Transport from "../../src/cluster/Transport.js"
import type { ChatMessage } from "../../src/domain/Inference.js"
import * as Client from "../../src/rpc/Client.js"
import { Provider } from "../../src/services/Provider.js"
import { makeHome, run, smallServerEnv, startServer } from "../cli/support.js"
import { answerOf, collectFrom, doneOf, tokensOf } from "../support/generation.js"

const SHARDS = 12

interface Member {
  readonly name: string
  /** The runner's address as the storage records it (`PATH:0`). */
  readonly stored: string
  readonly provider: Provider["Type"]
}

class TestCluster extends Context.Tag("test/TestCluster")<TestCluster, {
  readonly members: ReadonlyArray<Member>
  readonly storage: Storage.StorageSpec
}>() {}

/** Three runners sharing one storage file; each with its own home, store and public socket. */
const clusterLayer = Layer.scoped(
  TestCluster,
  Effect.gen(function*() {
    const dir = yield* Effect.acquireRelease(
      Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "ngc-"))),
      (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
    )
    const storage = Path.join(dir, "cluster.db")
    const members = yield* Effect.forEach(["r1", "r2", "r3"], (name) =>
      Effect.gen(function*() {
        const home = yield* makeHome
        const runnerSocket = Path.join(dir, `${name}.sock`)
        const server = yield* startServer(home, {
          ...smallServerEnv,
          NATIVEGEN_CLUSTER: runnerSocket,
          NATIVEGEN_CLUSTER_STORAGE: storage,
          NATIVEGEN_CLUSTER_SHARDS: String(SHARDS)
        }, "240 seconds")
        const context = yield* Layer.build(Client.layer({ socketPath: server.socket }))
        return { name, stored: `${runnerSocket}:0`, provider: Context.get(context, Provider) }
      }), { concurrency: "unbounded" })
    return { members, storage: { _tag: "Sqlite", file: storage } as const }
  })
)

/** The client-only Sharding (for conversations' shards) and the SQL client over the cluster's storage. */
const viewLayer = Layer.unwrapEffect(Effect.map(TestCluster, ({ storage }) => Runner.layerClientOnly({ storage, shards: SHARDS })))

/** Shard locks once the cluster settled: every shard locked, by the three runners, the same in two reads (settle.ts). */
const settled = Effect.flatMap(TestCluster, ({ members }) => shardLocks(members.map((m) => m.stored), SHARDS))



const settings = { maxTokens: 8, sampling: { temperature: 0 }, thinking: false } as const

/** Two turns of `conversation` with `first` then `second`, each through the given entry. */
const twoTurns = (conversation: string, first: string, second: string, entries: readonly [Provider["Type"], Provider["Type"]]) =>
  Effect.gen(function*() {
    const user1: ChatMessage = { role: "user", content: first }
    const one = yield* collectFrom(entries[0], { messages: [user1], conversation, ...settings })
    const two = yield* collectFrom(entries[1], {
      messages: [user1, { role: "assistant", content: answerOf(one) }, { role: "user", content: second }],
      conversation,
      checkpoint: doneOf(one).checkpoint!,
      ...settings
    })
    return { one, two }
  })

const generationsOf = (member: Member) => Effect.map(member.provider.readiness, (r) => r.recentGenerations?.length ?? 0)

describe("a cluster of three runners", () => {
  layer(Layer.provideMerge(viewLayer, clusterLayer), { timeout: 300_000, excludeTestServices: true })("on Unix sockets", (it) => {
    it.effect("conversations land on their shards' runners through any entry; follow-ups continue; tokens equal one runtime's; cluster status shows it", () =>
      Effect.gen(function*() {
        const { members } = yield* TestCluster
        const [r1, r2, r3] = members as [Member, Member, Member]
        const snapshot = yield* settled
        // The first conversation id owned by each runner, and a second one owned by r1 (the twins).
        const owned = new Map<string, Array<string>>()
        for (let i = 0; members.some((m) => (owned.get(m.stored)?.length ?? 0) < 3); i++) {
          const id = `conversation-${i}`
          const owner = yield* Status.ownerOf(snapshot, id)
          if (owner !== undefined) owned.set(owner, [...(owned.get(owner) ?? []), id])
          if (i > 10_000) assert.fail("no conversation ids for every runner")
        }
        const ids = (m: Member) => owned.get(m.stored)!
        const before = yield* Effect.forEach(members, generationsOf)

        // Owned by r2 and r3, sent through r1 (and the follow-ups through the third runner).
        const onR2 = yield* twoTurns(ids(r2)[0]!, "where is the ship", "and the crew", [r1.provider, r3.provider])
        const onR3 = yield* twoTurns(ids(r3)[0]!, "the storm is near", "what now", [r1.provider, r2.provider])
        // The same turns on r1's own conversations, through r1: one runtime, no hop.
        const aloneR2 = yield* twoTurns(ids(r1)[0]!, "where is the ship", "and the crew", [r1.provider, r1.provider])
        const aloneR3 = yield* twoTurns(ids(r1)[1]!, "the storm is near", "what now", [r1.provider, r1.provider])

        const after = yield* Effect.forEach(members, generationsOf)
        assert.deepStrictEqual(after.map((n, i) => n - before[i]!), [4, 2, 2], "generations served by r1, r2, r3")
        // The remote turns went straight to their owners (ChunkChannel's Serve), not through the
        // cluster's envelopes: the owners count them in their load answers.
        for (const owner of [r2, r3]) assert.isAbove((yield* loadOf(owner, SHARDS)).directTurns ?? 0, 0, `${owner.name}'s direct turns`)
        for (const [remote, alone] of [[onR2, aloneR2], [onR3, aloneR3]] as const) {
          assert.strictEqual(doneOf(remote.two).usage.reuse, "continuation")
          assert.strictEqual(doneOf(alone.two).usage.reuse, "continuation")
          assert.isAbove(tokensOf(remote.one).length, 0)
          assert.deepStrictEqual(tokensOf(remote.one), tokensOf(alone.one))
          assert.deepStrictEqual(tokensOf(remote.two), tokensOf(alone.two))
          assert.strictEqual(doneOf(remote.two).usage.reusedTokens, doneOf(alone.two).usage.reusedTokens)
        }

        // `nativegen cluster status` shows the runners, their shards and where each conversation was served.
        const { storage } = yield* TestCluster
        const result = yield* run([
          "cluster",
          "status",
          "--cluster-storage",
          storage._tag === "Sqlite" ? storage.file : assert.fail("sqlite"),
          "--cluster-shards",
          String(SHARDS),
          "--json"
        ])
        assert.strictEqual(result.code, 0, result.stderr)
        const shown = JSON.parse(result.stdout) as {
          runners: Array<{ address: string; healthy: boolean; shards: Array<number> }>
          conversations: Array<{ conversation: string; lastTurnOn: string; holder: string }>
        }
        const pathOf = (m: Member) => m.stored.slice(0, -":0".length)
        assert.deepStrictEqual(shown.runners.map((r) => r.address).sort(), members.map(pathOf).sort())
        assert.isTrue(shown.runners.every((r) => r.healthy))
        assert.strictEqual(shown.runners.reduce((n, r) => n + r.shards.length, 0), SHARDS)
        const placed = new Map(shown.conversations.map((c) => [c.conversation, c]))
        for (const [member, id] of [[r2, ids(r2)[0]!], [r3, ids(r3)[0]!], [r1, ids(r1)[0]!], [r1, ids(r1)[1]!]] as const) {
          assert.strictEqual(placed.get(id)?.lastTurnOn, pathOf(member), id)
          assert.strictEqual(placed.get(id)?.holder, pathOf(member), id)
        }
      }), 240_000)

    it.effect("prepare through any entry prefills on the conversation's runner: its next turn, through a third, reuses it (`prepared`)", () =>
      Effect.gen(function*() {
        const { members } = yield* TestCluster
        const [r1, r2, r3] = members as [Member, Member, Member]
        const snapshot = yield* settled
        let conversation: string | undefined
        for (let i = 0; conversation === undefined; i++) {
          if ((yield* Status.ownerOf(snapshot, `prepared-${i}`)) === r2.stored) conversation = `prepared-${i}`
          if (i > 10_000) assert.fail("no conversation id for r2")
        }
        const prefix: ReadonlyArray<ChatMessage> = [{ role: "system", content: "you keep the ship log. ".repeat(20) }]
        const history: ReadonlyArray<ChatMessage> = [
          { role: "user", content: "log the wind and the sail at night. ".repeat(12) },
          { role: "assistant", content: "logged the storm and the calm. ".repeat(12) }
        ]
        // Prepared through r1 (not the owner); without routing it would prefill r1's engine.
        const result = yield* r1.provider.prepare({ conversation, prefix, history })
        assert.isTrue(result.complete)
        assert.isAbove(result.preparedTokens, 0)
        const turn = yield* collectFrom(r3.provider, {
          messages: [...prefix, ...history, { role: "user", content: "what now" }],
          conversation,
          ...settings
        })
        assert.strictEqual(doneOf(turn).usage.reuse, "prepared")
        // Qwen3's template renders the last assistant message of `history` differently once a user
        // message follows it, so the turn shares only the chunks before that (128 of 256 here).
        assert.isAbove(doneOf(turn).usage.reusedTokens, 0)
        assert.isAtMost(doneOf(turn).usage.reusedTokens, result.preparedTokens)
      }), 120_000)

    it.scoped("a runner refuses a direct turn of a conversation whose shard it does not hold (NotOwner), before any chunk", () =>
      Effect.gen(function*() {
        const { members } = yield* TestCluster
        const [r1, r2] = members as [Member, Member, Member]
        const snapshot = yield* settled
        let conversation: string | undefined
        for (let i = 0; conversation === undefined; i++) {
          if ((yield* Status.ownerOf(snapshot, `elsewhere-${i}`)) === r2.stored) conversation = `elsewhere-${i}`
          if (i > 10_000) assert.fail("no conversation id for r2")
        }
        // r1's sink, called as an entry whose loads were stale would call it.
        const r1Sink = ChunkChannel.sinkListenAddress(Transport.unixAddress(r1.stored.slice(0, -":0".length)))
        const socket = yield* NodeSocket.makeNet({ path: r1Sink.host })
        const protocol = yield* RpcClient.makeProtocolSocket().pipe(
          Effect.provideService(Socket, socket),
          Effect.provide(RpcSerialization.layerMsgPack)
        )
        const client = yield* RpcClient.make(ChunkChannel.ChunkRpcs).pipe(Effect.provideService(RpcClient.Protocol, protocol))
        const refused = yield* Effect.flip(client.Serve({
          conversation,
          turn: "a-turn",
          request: { messages: [{ role: "user", content: "hello" }], conversation, ...settings },
          sink: r1Sink
        }))
        assert.strictEqual(refused._tag, "NotOwner")
      }), 60_000)
  })
})
