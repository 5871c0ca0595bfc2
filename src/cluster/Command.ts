/**
 * `nativegen cluster status`: the cluster as its runner storage shows it: the runners (health,
 * last heartbeat, the shards each holds), and each conversation that was served, with the runner
 * that served its last turn and the runner holding its shard now (they differ when the shard
 * moved: the next turn runs on the new holder). Reads the storage directly; needs no runner to be
 * reachable. `--json` prints the same as one JSON object.
 */
import * as Command from "@effect/cli/Command"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { CliUsageError } from "../cli/CliError.js"
import * as Flags from "../cli/Flags.js"
import * as Placement from "./Placement.js"
import * as Runner from "./Runner.js"
import * as ServeOptions from "./ServeOptions.js"
import * as Status from "./Status.js"
import * as Storage from "./Storage.js"

const options = {
  clusterStorage: ServeOptions.options.clusterStorage,
  clusterShards: ServeOptions.options.clusterShards,
  json: Flags.json
}

/** `PATH:0` back to the socket path; `HOST:PORT` as it is. */
const shown = (stored: string) => stored.endsWith(":0") && stored.startsWith("/") ? stored.slice(0, -2) : stored

/** Shard numbers as ranges: `1-3, 7`. */
export const ranges = (numbers: ReadonlyArray<number>): string => {
  const sorted = [...numbers].sort((a, b) => a - b)
  const parts: Array<string> = []
  for (let i = 0; i < sorted.length;) {
    let j = i
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j]! + 1) j++
    parts.push(i === j ? `${sorted[i]}` : `${sorted[i]}-${sorted[j]}`)
    i = j + 1
  }
  return parts.join(", ")
}

const shardNumber = (shard: string) => Number(shard.slice(shard.lastIndexOf(":") + 1))

export const status = (settings: {
  readonly clusterStorage: Option.Option<string>
  readonly clusterShards: Option.Option<number>
  readonly json: boolean
}) =>
  Effect.gen(function*() {
    const storage = Storage.parseStorage(Option.getOrElse(settings.clusterStorage, ServeOptions.defaultStorage))
    if (storage instanceof Storage.InvalidStorage) return yield* new CliUsageError({ reason: storage.message })
    const shards = Option.getOrElse(settings.clusterShards, () => ServeOptions.defaults.shards)
    yield* Effect.gen(function*() {
      const snapshot = yield* Status.snapshot
      const placements = yield* Placement.list
      const conversations = yield* Effect.forEach(placements, (p) =>
        Effect.map(Effect.all({ shard: Status.shardOf(p.conversation), holder: Status.ownerOf(snapshot, p.conversation) }), (at) => ({
          conversation: p.conversation,
          lastTurnOn: shown(p.address),
          lastTurnAt: p.updated_at,
          shard: at.shard,
          holder: at.holder === undefined ? null : shown(at.holder)
        })))
      const held = (address: string) =>
        [...(snapshot.shards ?? [])].filter(([, holder]) => holder === address).map(([shard]) => shardNumber(shard))
      const runners = snapshot.runners.map((r) => ({
        address: shown(r.address),
        healthy: r.healthy,
        lastHeartbeat: r.lastHeartbeat,
        shards: snapshot.shards === undefined ? null : held(r.address)
      }))
      if (settings.json) {
        return yield* Console.log(JSON.stringify({ storage: Storage.describeStorage(storage), shards, locks: snapshot.locks ?? null, runners, conversations }, null, 2))
      }
      const lines = [`storage: ${Storage.describeStorage(storage)}, ${shards} shards`, `runners (${runners.length}):`]
      for (const r of runners) {
        lines.push(
          `  ${r.address}  ${r.healthy ? "healthy" : "UNHEALTHY"}  heartbeat ${r.lastHeartbeat}  ` +
            (r.shards === null ? "shards: not known" : `${r.shards.length} shards: ${ranges(r.shards) || "none"}`)
        )
      }
      if (snapshot.shards !== undefined) {
        const registered = new Set(snapshot.runners.map((r) => r.address))
        const others = new Map<string, Array<number>>()
        for (const [shard, holder] of snapshot.shards) {
          if (!registered.has(holder)) others.set(holder, [...(others.get(holder) ?? []), shardNumber(shard)])
        }
        for (const [holder, held] of others) lines.push(`  ${holder} (no registered runner)  ${held.length} shards: ${ranges(held)}`)
        lines.push(`shards locked: ${snapshot.shards.size} of ${shards}` +
          (snapshot.locks === "advisory" ? " (PostgreSQL advisory locks; each session named by the runner whose assigned shards it holds)" : ""))
      }
      lines.push(`conversations (${conversations.length}):`)
      for (const c of conversations) {
        const moved = c.holder !== null && c.holder !== c.lastTurnOn ? `, next turn on ${c.holder}` : ""
        lines.push(`  ${c.conversation}  on ${c.lastTurnOn} (${c.shard}${moved}), last turn ${c.lastTurnAt}`)
      }
      yield* Console.log(lines.join("\n"))
    }).pipe(
      Effect.provide(Runner.layerClientOnly({ storage, shards })),
      Effect.mapError((error) => new CliUsageError({ reason: `cluster storage ${Storage.describeStorage(storage)}: ${error.message}` }))
    )
  })

const statusCommand = Command.make("status", options, status).pipe(
  Command.withDescription("Show the cluster's runners, their shards, and where each conversation is served")
)

export const command = Command.make("cluster").pipe(
  Command.withDescription("Look at a nativegen cluster (see docs/cluster.md)"),
  Command.withSubcommands([statusCommand])
)
