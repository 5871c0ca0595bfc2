/**
 * Failpoints that act from inside the engine on what lies outside it (tests only): the hooks that
 * reach the protocol channel and the process, and the faults due after a count of decoded tokens.
 * Without failpoints the per-token hook does nothing.
 */
import type { Failpoints } from "../Failpoints.js"

/** How failpoints reach outside the engine (the protocol channel); tests only. */
export interface FaultHooks {
  readonly failpoints: Failpoints | undefined
  readonly writeRaw: (bytes: Uint8Array) => void
  readonly exit: () => void
}

const none = (_decodedTokens: number) => {}

/** The faults to fire after each decoded token, given the count decoded over the child's life. */
export const afterDecodedToken = (faults: FaultHooks | undefined): (decodedTokens: number) => void => {
  const failpoints = faults?.failpoints
  if (faults === undefined || failpoints === undefined) return none
  return (decodedTokens) => {
    if (decodedTokens === failpoints.crashAfterTokens) process.kill(process.pid, "SIGKILL")
    if (decodedTokens === failpoints.garbageAfterTokens) faults.writeRaw(Buffer.from("\xc1\xc1 not msgpack \xc1", "latin1"))
    if (decodedTokens === failpoints.oversizedFrameAfterTokens) {
      // A msgpack str32 header announcing 1 GiB, then a trickle: the host must refuse, not buffer.
      faults.writeRaw(Buffer.concat([Buffer.from([0xdb, 0x40, 0x00, 0x00, 0x00]), Buffer.alloc(16 * 1024 * 1024, 0x61)]))
    }
    if (decodedTokens === failpoints.partialFrameAfterTokens) {
      faults.writeRaw(Buffer.from([0xdb, 0x00, 0x00, 0x10, 0x00, 0x61, 0x61]))
      faults.exit()
    }
  }
}
