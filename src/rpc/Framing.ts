/**
 * Inbound framing of the server's wire: newline-delimited frames cut out of a byte stream without
 * ever buffering more than the message limit of one, and the nesting check that refuses a frame
 * too deep to decode safely, before it is parsed.
 */

/** Deepest nesting of arrays and objects in a message (requests nest a handful of levels). */
export const maxNestingDepth = 64

/** Bytes of an oversized frame kept to find its request id and tag. */
export const headBytes = 512

const newline = 0x0a

/**
 * Splits a byte stream into newline-terminated frames, never holding more than `max` bytes of
 * one: a longer frame is reported once (with its first bytes) and the rest of it skipped.
 */
export class Framer {
  private parts: Array<Uint8Array> = []
  private size = 0
  private discarding = false

  constructor(private readonly max: number) {}

  push(
    chunk: Uint8Array,
    onFrame: (frame: Buffer) => void,
    onOversized: (head: Buffer, size: number) => void
  ): void {
    let start = 0
    for (;;) {
      const nl = chunk.indexOf(newline, start)
      const piece = chunk.subarray(start, nl === -1 ? chunk.length : nl)
      if (!this.discarding && piece.length > 0) {
        if (this.size + piece.length > this.max) {
          const parts = [...this.parts, piece]
          const head = Buffer.concat(parts.map((p) => p.subarray(0, headBytes))).subarray(0, headBytes)
          const size = this.size + piece.length
          this.parts = []
          this.size = 0
          this.discarding = true
          onOversized(head, size)
        } else {
          this.parts.push(piece)
          this.size += piece.length
        }
      }
      if (nl === -1) return
      if (!this.discarding && this.size > 0) onFrame(Buffer.concat(this.parts, this.size))
      this.parts = []
      this.size = 0
      this.discarding = false
      start = nl + 1
    }
  }
}

/**
 * Whether the JSON text `frame` nests arrays and objects deeper than `max` (brackets inside
 * strings do not count). Decoding errors are printed recursively, so a deep enough value would
 * overflow the stack where it is reported: such a frame is refused before it is parsed.
 */
export const nestsDeeperThan = (frame: Uint8Array, max: number): boolean => {
  if (frame.length <= max) return false
  let depth = 0
  let inString = false
  for (let i = 0; i < frame.length; i++) {
    const byte = frame[i]!
    if (inString) {
      if (byte === 0x5c) i++
      else if (byte === 0x22) inString = false
    } else if (byte === 0x22) {
      inString = true
    } else if (byte === 0x5b || byte === 0x7b) {
      if (++depth > max) return true
    } else if (byte === 0x5d || byte === 0x7d) {
      depth--
    }
  }
  return false
}
