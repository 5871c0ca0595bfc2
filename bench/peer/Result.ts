/**
 * The peer benchmark's result (`bench/results/peer.json`): every figure with its rounds, medians,
 * ranges and ratio against what it is compared with, its target and whether it was met, plus the
 * machine, the load, the versions and the git revision it was measured on.
 */
import * as Schema from "effect/Schema"
import { Summary } from "./Stats.js"

/**
 * `atLeast`: the ratio (or, with `on: "nativegen"`, nativegen's own median) must reach the value;
 * `atMost`: it must not exceed it.
 */
export const Target = Schema.Struct({
  comparison: Schema.Literal("atLeast", "atMost"),
  value: Schema.Number,
  on: Schema.optional(Schema.Literal("ratio", "nativegen"))
})
export type Target = typeof Target.Type

export const Figure = Schema.Struct({
  /** Stable key, e.g. `decode.llamaServer.t1`. */
  id: Schema.String,
  title: Schema.String,
  /** The unit of `nativegen` and `peer` (the ratio has none). */
  unit: Schema.String,
  threads: Schema.optional(Schema.Int),
  nativegen: Summary,
  /** What nativegen is compared with: llama-server, the in-process loop, a cold start, sha256sum, ... */
  peerName: Schema.String,
  peer: Summary,
  /** nativegen ÷ peer, per round. */
  ratio: Summary,
  target: Schema.optional(Target),
  /** Whether the ratio's median meets the target (absent without a target). */
  met: Schema.optional(Schema.Boolean),
  note: Schema.optional(Schema.String)
})
export type Figure = typeof Figure.Type

export const Skipped = Schema.Struct({ id: Schema.String, reason: Schema.String })
export type Skipped = typeof Skipped.Type

export const PeerResult = Schema.Struct({
  schema: Schema.Literal(1),
  startedAt: Schema.String,
  finishedAt: Schema.String,
  gitRevision: Schema.String,
  settings: Schema.Struct({
    rounds: Schema.Int,
    quick: Schema.Boolean,
    threads: Schema.Array(Schema.Int),
    model: Schema.String,
    modelDigest: Schema.String,
    contextSize: Schema.Int
  }),
  machine: Schema.Struct({
    cpu: Schema.String,
    logicalCpus: Schema.Int,
    memoryBytes: Schema.Number,
    os: Schema.String,
    node: Schema.String
  }),
  versions: Schema.Struct({
    nativegen: Schema.String,
    nodeLlamaCpp: Schema.String,
    llamaCppRelease: Schema.String,
    llamaServer: Schema.Struct({
      cpuVariant: Schema.String,
      cmakeArguments: Schema.Array(Schema.String)
    })
  }),
  load: Schema.Struct({ before: Schema.String, after: Schema.String }),
  figures: Schema.Array(Figure),
  skipped: Schema.Array(Skipped)
})
export type PeerResult = typeof PeerResult.Type

/** Whether a value (the ratio, or nativegen's median for `on: "nativegen"`) meets a target. */
export const meets = (value: number, target: Target): boolean =>
  target.comparison === "atLeast" ? value >= target.value : value <= target.value

/** A figure from its two sides' rounds: the ratio per round, and whether its median meets the target. */
export const figure = (
  fields: Omit<Figure, "ratio" | "met" | "nativegen" | "peer"> & {
    readonly nativegen: Summary
    readonly peer: Summary
    readonly ratio: Summary
  }
): Figure => ({
  ...fields,
  ...(fields.target === undefined
    ? {}
    : { met: meets(fields.target.on === "nativegen" ? fields.nativegen.median : fields.ratio.median, fields.target) })
})

export const encode = Schema.encodeSync(Schema.parseJson(PeerResult, { space: 2 }))
export const decode = Schema.decodeUnknownSync(Schema.parseJson(PeerResult))
