/**
 * Reply faults of the engine child (tests only): wraps the child's serialization so that a chosen
 * reply leaves in a valid frame but with a value that fails its schema on the host, the way a
 * child with a protocol bug would answer. Without reply failpoints the serialization is returned
 * unchanged.
 */
import type * as RpcSerialization from "@effect/rpc/RpcSerialization"
import type { Failpoints } from "./Failpoints.js"

type Serialization = RpcSerialization.RpcSerialization["Type"]

const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null

export const withReplyFaults = (serialization: Serialization, failpoints: Failpoints | undefined): Serialization => {
  const atToken = failpoints?.invalidReplyAtToken
  const onScore = failpoints?.invalidScoreReply === true
  if (atToken === undefined && !onScore) return serialization
  let tokens = 0
  let scores = 0
  /** Breaks the value in place when it is the chosen one. */
  const corrupt = (value: unknown): void => {
    if (!isRecord(value)) return
    if (value._tag === "Token" && ++tokens === atToken) value.token = -1
    // The first score is the warm-up: break the first one that serves a request.
    if (value._tag === "Scored" && onScore && ++scores === 2) value.heads = "not a list of heads"
  }
  return {
    ...serialization,
    unsafeMake() {
      const parser = serialization.unsafeMake()
      return {
        decode: (bytes) => parser.decode(bytes),
        encode(message) {
          if (isRecord(message) && message._tag === "Chunk" && Array.isArray(message.values)) {
            for (const value of message.values) corrupt(value)
          }
          return parser.encode(message)
        }
      }
    }
  }
}
