/**
 * A generation's output, token by token: control tokens split it into channels (thought, answer,
 * tool; a malformed boundary is a typed error), stop strings end the answer (the stop string is
 * never emitted; see StopStrings.ts), and each Text chunk carries the tokens behind its text.
 * Stop strings apply to the answer channel only: thought and tool output pass through whole.
 * A token limit that ends the output inside the thought or tool channel cuts it (reported with
 * the channel), it does not make it malformed.
 */
import * as Either from "effect/Either"
import type { Channel, GenerateChunk } from "../../domain/Inference.js"
import * as ChannelDecoder from "../ChannelDecoder.js"
import * as StopStrings from "./StopStrings.js"

/** A token's id and, when asked for, its probability. */
interface Scored {
  readonly token: number
  readonly probability: number | undefined
}

/** Per-generation output state: channels, stop strings, the tokens behind text not yet emitted. */
export const outputState = (special: ChannelDecoder.ChannelTokens, stops: ReadonlyArray<string>) => {
  const decoder = ChannelDecoder.make(special)
  const matcher = StopStrings.make(stops)
  let pending: Array<Scored> = []
  let lastChannel: Channel = "answer"
  const text = (channel: Channel, value: string, scored: ReadonlyArray<Scored>): ReadonlyArray<GenerateChunk> => {
    if (value.length === 0 && scored.length === 0) return []
    const probabilities = scored.flatMap((s) => (s.probability === undefined ? [] : [s.probability]))
    return [{
      _tag: "Text",
      channel,
      text: value,
      tokens: scored.map((s) => s.token),
      ...(probabilities.length === scored.length && probabilities.length > 0 ? { probabilities } : {})
    }]
  }

  /** Stop strings apply to the answer channel; held-back answer text is released when the channel changes. */
  const flushAnswer = (): ReadonlyArray<GenerateChunk> => {
    const rest = matcher.flush()
    const scored = pending
    pending = []
    return text("answer", rest, scored)
  }

  return {
    /** Chunks for one generated token (with its probability, if known), and whether a stop string ended the output. */
    token: (
      token: number,
      value: string,
      probability?: number
    ): Either.Either<{ chunks: ReadonlyArray<GenerateChunk>; stopped: boolean }, ChannelDecoder.MalformedChannel> =>
      Either.map(decoder.push(token, value), (pieces) => {
        const chunks: Array<GenerateChunk> = []
        for (const piece of pieces) {
          const scored = piece.tokens.map((t) => ({ token: t, probability }))
          if (piece.channel !== "answer") {
            if (lastChannel === "answer") chunks.push(...flushAnswer())
            chunks.push(...text(piece.channel, piece.text, scored))
          } else {
            pending.push(...scored)
            const scan = matcher.push(piece.text)
            if (scan.emit.length > 0 || scan.stopped) {
              chunks.push(...text("answer", scan.emit, scan.stopped ? [] : pending))
              pending = []
            }
            if (scan.stopped) return { chunks, stopped: true }
          }
          lastChannel = piece.channel
        }
        return { chunks, stopped: false }
      }),
    /**
     * The end of the output: the held-back answer text, and the channel a token limit cut (null
     * when none). When the model ended its output itself, a channel still open is malformed.
     */
    finish: (
      limitReached: boolean
    ): Either.Either<{ chunks: ReadonlyArray<GenerateChunk>; truncated: ChannelDecoder.OpenChannel | null }, ChannelDecoder.MalformedChannel> =>
      limitReached
        ? Either.map(decoder.truncate(), (truncated) => ({ chunks: flushAnswer(), truncated }))
        : Either.map(decoder.finish(), () => ({ chunks: flushAnswer(), truncated: null }))
  }
}
