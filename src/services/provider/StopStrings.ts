/**
 * Stop strings over streamed text. Text is released as soon as it cannot be the start of a stop
 * string; a suffix that could still grow into one is held back until the next piece decides it.
 * When a stop string appears, everything before it is released and the stop string itself is not.
 */
export interface StopScan {
  /** Text that is safe to emit now. */
  readonly emit: string
  /** True when a stop string was found (nothing after it may be emitted). */
  readonly stopped: boolean
}

export interface StopMatcher {
  readonly push: (text: string) => StopScan
  /** Releases the held-back text at the end of the output (it never became a stop string). */
  readonly flush: () => string
}

export const make = (stops: ReadonlyArray<string>): StopMatcher => {
  const patterns = stops.filter((s) => s.length > 0)
  let held = ""
  /** Length of the longest suffix of `text` that is a proper prefix of some stop string. */
  const partial = (text: string) => {
    let best = 0
    for (const stop of patterns) {
      for (let n = Math.min(stop.length - 1, text.length); n > best; n--) {
        if (text.endsWith(stop.slice(0, n))) {
          best = n
          break
        }
      }
    }
    return best
  }
  return {
    push: (text) => {
      const buffer = held + text
      // The stop string that is complete first (ends earliest; on a tie, starts earliest): that is
      // the one a token-by-token reader would see first, however the text was split into pieces.
      let at = -1
      let end = Infinity
      for (const stop of patterns) {
        const i = buffer.indexOf(stop)
        if (i < 0) continue
        const e = i + stop.length
        if (e < end || (e === end && i < at)) {
          at = i
          end = e
        }
      }
      if (at >= 0) {
        held = ""
        return { emit: buffer.slice(0, at), stopped: true }
      }
      const keep = partial(buffer)
      held = buffer.slice(buffer.length - keep)
      return { emit: buffer.slice(0, buffer.length - keep), stopped: false }
    },
    flush: () => {
      const rest = held
      held = ""
      return rest
    }
  }
}
