/**
 * Test failpoints of the engine child, read once from its environment at start-up. The host sets
 * them only through NativeWorker's `childEnv` (tests do); no RPC or CLI option reaches them.
 * Unset, each check is one comparison against `undefined`.
 *
 * NATIVEGEN_FAILPOINTS="name[=N][@i,j];..." where `@i,j` limits a failpoint to the children with
 * those incarnation numbers (NATIVEGEN_INCARNATION, counted from 1 by the host).
 */

export interface Failpoints {
  /** SIGKILL itself after decoding N tokens in total. */
  readonly crashAfterTokens?: number
  /** SIGKILL itself when asked to load a model. */
  readonly crashDuringLoad?: true
  /** Stop making progress (forever, holding the engine) at decode step N. */
  readonly hangAtStep?: number
  /** Write garbage bytes on the protocol channel after N decoded tokens. */
  readonly garbageAfterTokens?: number
  /** Announce an oversized frame on the protocol channel after N decoded tokens. */
  readonly oversizedFrameAfterTokens?: number
  /** Write half a frame, then exit, after N decoded tokens. */
  readonly partialFrameAfterTokens?: number
  /** Fail every label-scoring request (so that warm-up fails). */
  readonly failScore?: true
  /** Stop making progress (forever, holding the engine) in the next label-scoring request after warm-up. */
  readonly hangScore?: true
  /** Load slowly: N progress reports 200 ms apart before loading (a slow load, not a hang). */
  readonly slowLoadSteps?: number
  /** Stop making progress (forever) when asked to load a model. */
  readonly hangDuringLoad?: true
  /** Send the N-th decoded token (counted over the child's life) with a value that fails its schema. */
  readonly invalidReplyAtToken?: number
  /** Send the first score result after warm-up with a value that fails its schema. */
  readonly invalidScoreReply?: true
  /**
   * Wait N ms before each prefill call (a slow engine: a big model or a busy machine), so that a
   * cancel's trip from the host is short against one call, as it is on a real model.
   */
  readonly slowPrefillCallMs?: number
}

const numeric = new Set([
  "crashAfterTokens",
  "hangAtStep",
  "garbageAfterTokens",
  "oversizedFrameAfterTokens",
  "partialFrameAfterTokens",
  "slowLoadSteps",
  "invalidReplyAtToken",
  "slowPrefillCallMs"
])
const flags = new Set(["crashDuringLoad", "failScore", "hangScore", "hangDuringLoad", "invalidScoreReply"])

export const parseFailpoints = (spec: string | undefined, incarnation: number): Failpoints | undefined => {
  if (spec === undefined || spec.trim() === "") return undefined
  const result: Record<string, number | true> = {}
  for (const item of spec.split(";")) {
    const [body, only] = item.trim().split("@") as [string, string | undefined]
    if (only !== undefined && !only.split(",").map(Number).includes(incarnation)) continue
    const [name, value] = body.split("=") as [string, string | undefined]
    if (numeric.has(name) && value !== undefined && Number.isInteger(Number(value))) result[name] = Number(value)
    else if (flags.has(name)) result[name] = true
    else throw new Error(`unknown failpoint ${item}`)
  }
  return Object.keys(result).length === 0 ? undefined : (result as Failpoints)
}

/** Renders failpoints for a child's environment (host side, tests only). */
export const failpointsEnv = (spec: string): Record<string, string> => ({ NATIVEGEN_FAILPOINTS: spec })
