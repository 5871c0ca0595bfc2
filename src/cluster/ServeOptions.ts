/**
 * `nativegen serve`'s cluster flags: `--cluster ADDRESS` makes the server a cluster runner (see
 * docs/cluster.md), with its storage, failure detection time and shard count. Only the flags and
 * their reading live here; the runner itself (src/cluster/Runner.ts) is imported when a cluster
 * is asked for.
 */
import { RunnerAddress } from "@effect/cluster/RunnerAddress"
import * as Options from "@effect/cli/Options"
import * as Config from "effect/Config"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Os from "node:os"
import * as Path from "node:path"
import { CliUsageError } from "../cli/CliError.js"
import * as Flags from "../cli/Flags.js"
import { parseListen } from "../http/HttpConfig.js"
import type { RunnerSettings } from "./Runner.js"
import * as Storage from "./StorageSpec.js"

/** The runner storage when none is named: one SQLite file per user on the host. */
export const defaultStorage = (): string =>
  Path.join(process.env.XDG_DATA_HOME ?? Path.join(Os.homedir(), ".local", "share"), "nativegen", "cluster.db")

/** Failure detection within 3 s; 60 shards (a few per runner is enough to spread conversations; more only cost lock rows). */
export const defaults = { detection: Duration.seconds(3), shards: 60 } as const

/** The longest `--cluster-hold`: a hold delays every token after the first by up to this much. */
export const maxHoldMillis = 100

export const options = {
  cluster: Flags.fromEnv(
    Options.text("cluster"),
    "NATIVEGEN_CLUSTER",
    Config.string,
    "Run as a cluster runner reachable by the other runners at HOST:PORT or a Unix socket path; conversations are " +
      "served by the runner that holds them (see docs/cluster.md)",
    "off"
  ),
  clusterStorage: Flags.fromEnv(
    Options.text("cluster-storage"),
    "NATIVEGEN_CLUSTER_STORAGE",
    Config.string,
    "Runner storage shared by all runners: a SQLite file (one host) or a postgres:// URL",
    defaultStorage()
  ),
  clusterDetection: Flags.fromEnv(
    Options.integer("cluster-detection"),
    "NATIVEGEN_CLUSTER_DETECTION",
    Config.integer,
    "Seconds within which a dead runner is noticed and its shards freed",
    String(Duration.toSeconds(defaults.detection))
  ),
  clusterConversations: Flags.fromEnv(
    Options.text("cluster-conversations"),
    "NATIVEGEN_CLUSTER_CONVERSATIONS",
    Config.string,
    "Directory of conversation state files shared by all runners: a conversation whose shard moves to another runner " +
      "is saved there and restored by the new owner instead of recomputed",
    "this runner's own, under its store"
  ),
  clusterHold: Flags.fromEnv(
    Options.integer("cluster-hold"),
    "NATIVEGEN_CLUSTER_HOLD",
    Config.integer,
    "Milliseconds a runner serving a stream for another runner holds its chunks after the first, to send them in fewer " +
      "messages",
    "0: the first chunk goes at once, then each message carries what is ready"
  ),
  clusterSinkPort: Flags.fromEnv(
    Options.integer("cluster-sink-port"),
    "NATIVEGEN_CLUSTER_SINK_PORT",
    Config.integer,
    "TCP port where this runner takes the turn chunks and direct turns of the other runners (TCP --cluster only): fix " +
      "it where a firewall must let it through",
    "0, a free port named in every turn"
  ),
  clusterShards: Flags.fromEnv(
    Options.integer("cluster-shards"),
    "NATIVEGEN_CLUSTER_SHARDS",
    Config.integer,
    "Shards the conversations are spread over; the same on every runner",
    String(defaults.shards)
  )
}

export interface ClusterFlags {
  readonly cluster: Option.Option<string>
  readonly clusterStorage: Option.Option<string>
  readonly clusterDetection: Option.Option<number>
  readonly clusterShards: Option.Option<number>
  readonly clusterConversations?: Option.Option<string>
  readonly clusterHold?: Option.Option<number>
  readonly clusterSinkPort?: Option.Option<number>
}

/** The runner's settings from the flags; none when `--cluster` is not given. */
export const settingsOf = (flags: ClusterFlags): Effect.Effect<RunnerSettings | undefined, CliUsageError> =>
  Effect.gen(function*() {
    if (Option.isNone(flags.cluster)) {
      if (Option.isSome(flags.clusterStorage)) yield* Effect.logWarning("--cluster-storage was given, but --cluster is off")
      return undefined
    }
    const listen = parseListen(flags.cluster.value)
    if (Either.isLeft(listen)) return yield* new CliUsageError({ reason: `--cluster: ${listen.left.message}` })
    const at = listen.right
    if (at._tag === "Tcp" && at.port === 0) {
      return yield* new CliUsageError({ reason: "--cluster: give the port the other runners reach (not 0)" })
    }
    const address = at._tag === "Unix"
      ? RunnerAddress.make({ host: Path.resolve(at.path), port: 0 })
      : RunnerAddress.make({ host: at.host, port: at.port })
    const storage = Storage.parseStorage(Option.getOrElse(flags.clusterStorage, defaultStorage))
    if (storage instanceof Storage.InvalidStorage) return yield* new CliUsageError({ reason: `--cluster-storage: ${storage.message}` })
    const detection = Option.getOrElse(flags.clusterDetection, () => Duration.toSeconds(defaults.detection))
    if (detection < 1) return yield* new CliUsageError({ reason: `--cluster-detection ${detection}: at least 1 second` })
    const shards = Option.getOrElse(flags.clusterShards, () => defaults.shards)
    if (shards < 1) return yield* new CliUsageError({ reason: `--cluster-shards ${shards}: at least 1` })
    const hold = Option.getOrElse(flags.clusterHold ?? Option.none(), () => 0)
    if (hold < 0 || hold > maxHoldMillis) {
      return yield* new CliUsageError({ reason: `--cluster-hold ${hold}: from 0 to ${maxHoldMillis} milliseconds` })
    }
    const sinkPort = Option.getOrElse(flags.clusterSinkPort ?? Option.none(), () => 0)
    if (sinkPort !== 0 && at._tag === "Unix") {
      return yield* new CliUsageError({ reason: `--cluster-sink-port ${sinkPort}: only for a TCP --cluster address (a Unix runner's sink is <socket>.chunks)` })
    }
    if (sinkPort < 0 || sinkPort > 65535 || (at._tag === "Tcp" && sinkPort === at.port)) {
      return yield* new CliUsageError({ reason: `--cluster-sink-port ${sinkPort}: from 1 to 65535, not the --cluster port (0: a free port)` })
    }
    const settings: RunnerSettings = { address, storage, detection: Duration.seconds(detection), shards, hold: Duration.millis(hold), sinkPort }
    return settings
  })
