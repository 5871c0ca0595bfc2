/**
 * Two `nativegen serve --cluster HOST:PORT --cluster-storage postgres://...` processes, as on two
 * machines (TCP on loopback, the runner storage in PostgreSQL: the server in
 * NATIVEGEN_TEST_POSTGRES, a database of its own; skipped with the reason where there is none).
 * qwen-chat, one thread, small contexts.
 *
 * Shard locks are PostgreSQL advisory locks here (no rows to read), so the cluster is settled when
 * the server shows every shard's lock granted, to two sessions, the same in two reads; and a
 * conversation's runner is seen by which runner's runtime counts the turn. Every conversation
 * gets the same first prompt through r1 until each runner owns one (its latest kept); the follow-ups go through the
 * other runner: each lands on its owner and reuses its KV (`continuation`), and the tokens of the
 * conversation served across the hop equal the one served with none. `cluster status` shows both
 * runners healthy, the shards each holds (from the server's lock table, every shard once) and each
 * conversation's shard held by the runner that served it.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as SqlClient from "@effect/sql/SqlClient"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Net from "node:net"
import type { ChatMessage, GenerateChunk } from "../../src/domain/Inference.js"
import * as Client from "../../src/rpc/Client.js"
import { Provider } from "../../src/services/Provider.js"
import { makeHome, run, smallServerEnv, startServer } from "../cli/support.js"
import { freePort } from "./free-port.js"
import { freshDatabase, named, unavailable } from "./postgres.js"
import { answerOf, collectFrom, doneOf, tokensOf } from "../support/generation.js"
import { stable } from "./settle.js"

const SHARDS = 6

interface Member {
  readonly name: string
  readonly address: string
  /** Its sink's fixed port (`--cluster-sink-port`), as behind a firewall. */
  readonly sinkPort: number
  readonly provider: Provider["Type"]
}

class PgCluster extends Context.Tag("test/PgCluster")<PgCluster, {
  readonly members: readonly [Member, Member]
  readonly url: string
}>() {}

const clusterLayer = Layer.scoped(
  PgCluster,
  Effect.gen(function*() {
    const url = yield* freshDatabase
    const members = yield* Effect.forEach(["r1", "r2"], (name) =>
      Effect.gen(function*() {
        const home = yield* makeHome
        const address = `127.0.0.1:${yield* freePort}`
        const sinkPort = yield* freePort
        const server = yield* startServer(home, {
          ...smallServerEnv,
          NATIVEGEN_CLUSTER: address,
          NATIVEGEN_CLUSTER_STORAGE: url,
          NATIVEGEN_CLUSTER_SHARDS: String(SHARDS),
          NATIVEGEN_CLUSTER_SINK_PORT: String(sinkPort)
        }, "240 seconds")
        const context = yield* Layer.build(Client.layer({ socketPath: server.socket }))
        return { name, address, sinkPort, provider: Context.get(context, Provider) }
      }), { concurrency: "unbounded" })
    return { members: [members[0]!, members[1]!] as const, url }
  })
)

/** An SQL client on the cluster's database (to read the server's lock table). */
const sqlLayer = Layer.unwrapEffect(Effect.map(PgCluster, ({ url }) => PgClient.layer({ url: Redacted.make(url), maxConnections: 1 })))

/** Every shard's advisory lock granted, held by two sessions (both runners), the same in two reads a refresh apart. */
const settled = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  stable(
    Effect.flatMap(
      sql<{ objid: number; pid: number }>`SELECT objid, pid FROM pg_locks WHERE locktype = 'advisory' AND granted ORDER BY objid`,
      (rows) =>
        rows.length === SHARDS && new Set(rows.map((r) => r.pid)).size === 2
          ? Effect.succeed(JSON.stringify(rows))
          : Effect.fail(`not settled: ${JSON.stringify(rows)}`)
    ),
    (rows) => rows
  ))

const generationsOf = (member: Member) => Effect.map(member.provider.readiness, (r) => r.recentGenerations?.length ?? 0)

const settings = { maxTokens: 8, sampling: { temperature: 0 }, thinking: false } as const
const first: ChatMessage = { role: "user", content: "where is the ship" }

describe.skipIf(unavailable !== undefined)(named("a cluster of two runners on PostgreSQL"), () => {
  layer(Layer.provideMerge(sqlLayer, clusterLayer), { timeout: 300_000, excludeTestServices: true })("over TCP", (it) => {
    it.effect("conversations land on their shards' runners through either entry; follow-ups continue; tokens equal with no hop", () =>
      Effect.gen(function*() {
        const { members, url } = yield* PgCluster
        const [r1, r2] = members
        yield* settled
        // First turns through r1, the same prompt each time, until each runner owns a conversation;
        // each runner's latest is kept (an earlier one may have left its slot for a state file).
        const owned = new Map<string, { id: string; one: ReadonlyArray<GenerateChunk> }>()
        for (let i = 0; owned.size < 2; i++) {
          if (i >= 16) assert.fail(`16 conversations, all on ${[...owned.keys()]}`)
          const before = yield* Effect.forEach(members, generationsOf)
          const id = `conversation-${i}`
          const one = yield* collectFrom(r1.provider, { messages: [first], conversation: id, ...settings })
          const after = yield* Effect.forEach(members, generationsOf)
          const servedBy = members.filter((_, k) => after[k]! > before[k]!)
          assert.strictEqual(servedBy.length, 1, `turn 1 of ${id} served by ${servedBy.map((m) => m.name)}`)
          owned.set(servedBy[0]!.name, { id, one })
        }
        // Follow-ups through the other entry: r2's conversation through r1 and r1's through r2.
        const followUp = (owner: Member, entry: Member) =>
          Effect.gen(function*() {
            const { id, one } = owned.get(owner.name)!
            const before = yield* Effect.forEach(members, generationsOf)
            const two = yield* collectFrom(entry.provider, {
              messages: [first, { role: "assistant", content: answerOf(one) }, { role: "user", content: "and the crew" }],
              conversation: id,
              checkpoint: doneOf(one).checkpoint!,
              ...settings
            })
            const after = yield* Effect.forEach(members, generationsOf)
            assert.deepStrictEqual(after.map((n, k) => n - before[k]!), members.map((m) => (m === owner ? 1 : 0)), `${id} served by ${owner.name}`)
            assert.strictEqual(doneOf(two).usage.reuse, "continuation", `${id}'s follow-up through ${entry.name}`)
            return { one, two }
          })
        const onR2 = yield* followUp(r2, r1)
        const onR1 = yield* followUp(r1, r2)
        // r1's first turn had no hop (entry = owner), r2's had one; both follow-ups had one.
        assert.isAbove(tokensOf(onR1.one).length, 0)
        assert.deepStrictEqual(tokensOf(onR2.one), tokensOf(onR1.one))
        assert.deepStrictEqual(tokensOf(onR2.two), tokensOf(onR1.two))

        const result = yield* run(["cluster", "status", "--cluster-storage", url, "--cluster-shards", String(SHARDS), "--json"])
        assert.strictEqual(result.code, 0, result.stderr)
        const shown = JSON.parse(result.stdout) as {
          locks: string | null
          runners: Array<{ address: string; healthy: boolean; shards: Array<number> | null }>
          conversations: Array<{ conversation: string; lastTurnOn: string; holder: string | null }>
        }
        assert.deepStrictEqual(shown.runners.map((r) => `${r.address} ${r.healthy}`).sort(), members.map((m) => `${m.address} true`).sort())
        const placed = new Map(shown.conversations.map((c) => [c.conversation, c]))
        assert.strictEqual(placed.get(owned.get("r1")!.id)?.lastTurnOn, r1.address)
        assert.strictEqual(placed.get(owned.get("r2")!.id)?.lastTurnOn, r2.address)
        // The shards of each runner, from the server's advisory locks: all of them, each once, and
        // each conversation's shard held by the runner that served it.
        assert.strictEqual(shown.locks, "advisory")
        const held = shown.runners.flatMap((r) => r.shards ?? assert.fail(`no shards shown for ${r.address}`))
        assert.deepStrictEqual([...held].sort((a, b) => a - b), Array.from({ length: SHARDS }, (_, i) => i + 1))
        assert.isTrue(shown.runners.every((r) => r.shards!.length > 0))
        assert.strictEqual(placed.get(owned.get("r1")!.id)?.holder, r1.address)
        assert.strictEqual(placed.get(owned.get("r2")!.id)?.holder, r2.address)
        // The turns' chunks came through the sinks on their fixed ports (ChunkChannel), which listen there.
        for (const member of members) {
          yield* Effect.async<void, string>((resume) => {
            const probe = Net.connect({ host: "127.0.0.1", port: member.sinkPort })
            probe.once("connect", () => (probe.destroy(), resume(Effect.void)))
            probe.once("error", (e) => resume(Effect.fail(`${member.name}'s sink on ${member.sinkPort}: ${e.message}`)))
          })
        }
      }))
  })
})
