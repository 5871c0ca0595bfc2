/**
 * The engine protocol's serialization: msgpack frames (self-delimiting) with a size limit, and a
 * check that every decoded value is an RPC envelope. msgpack reads most byte strings as *some*
 * value (ASCII bytes are small integers), so without the check garbage on the channel would be
 * silently ignored; with it, garbage is a decoding failure, which the host treats as a broken child.
 */
import * as RpcSerialization from "@effect/rpc/RpcSerialization"

/** Largest protocol frame either side accepts. The biggest real messages (long prompts) are < 1 MiB. */
export const MAX_FRAME_BYTES = 4 * 1024 * 1024

const envelopeTags = new Set([
  "Request", "Ack", "Interrupt", "Eof", "Ping",
  "Chunk", "Exit", "Defect", "Pong", "ClientEnd", "ClientProtocolError"
])

export class ProtocolViolation extends Error {
  constructor(readonly detail: string) {
    super(`protocol violation: ${detail}`)
  }
}

const isEnvelope = (value: unknown): boolean =>
  typeof value === "object" && value !== null && "_tag" in value && typeof value._tag === "string" &&
  envelopeTags.has(value._tag)

export const engineSerialization: RpcSerialization.RpcSerialization["Type"] = (() => {
  const msgpack = RpcSerialization.makeMsgPack({ maxBufferSize: MAX_FRAME_BYTES, useRecords: true })
  return RpcSerialization.RpcSerialization.of({
    ...msgpack,
    unsafeMake() {
      const parser = msgpack.unsafeMake()
      return {
        encode: (message) => parser.encode(message),
        decode(bytes) {
          const values = parser.decode(bytes)
          for (const value of values) {
            if (!isEnvelope(value)) throw new ProtocolViolation(`not an RPC message: ${String(JSON.stringify(value)).slice(0, 80)}`)
          }
          return values
        }
      }
    }
  })
})()
