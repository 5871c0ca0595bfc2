/**
 * A generation's output, token by token: control tokens split it into channels (thought, answer,
 * tool; a malformed boundary is a typed error), stop strings end the answer (the stop string is
 * never emitted; see StopStrings.ts), and each Text chunk carries the tokens behind its text.
 * Stop strings apply to the answer channel only: thought and tool output pass through whole.
 */
import * as Either from "effect/Either"
import type { Channel, GenerateChunk } from "../../domain/Inference.js"
import * as ChannelDecoder from "../ChannelDecoder.js"
import * as StopStrings from "./StopStrings.js"

/** Per-generation output state: channels, stop strings, the tokens behind text not yet emitted. */
export const outputState = (special: ChannelDecoder.ChannelTokens, stops: ReadonlyArray<string>) => {
  const decoder = ChannelDecoder.make(special)
  const matcher = StopStrings.make(stops)
  let pendingTokens: Array<number> = []
  let lastChannel: Channel = "answer"
  const text = (channel: Channel, value: string, tokens: ReadonlyArray<number>): ReadonlyArray<GenerateChunk> =>
    value.length === 0 && tokens.length === 0 ? [] : [{ _tag: "Text", channel, text: value, tokens }]

  /** Stop strings apply to the answer channel; held-back answer text is released when the channel changes. */
  const flushAnswer = (): ReadonlyArray<GenerateChunk> => {
    const rest = matcher.flush()
    const tokens = pendingTokens
    pendingTokens = []
    return text("answer", rest, tokens)
  }

  return {
    /** Chunks for one generated token, and whether a stop string ended the output. */
    token: (token: number, value: string): Either.Either<{ chunks: ReadonlyArray<GenerateChunk>; stopped: boolean }, ChannelDecoder.MalformedChannel> =>
      Either.map(decoder.push(token, value), (pieces) => {
        const chunks: Array<GenerateChunk> = []
        for (const piece of pieces) {
          if (piece.channel !== "answer") {
            if (lastChannel === "answer") chunks.push(...flushAnswer())
            chunks.push(...text(piece.channel, piece.text, piece.tokens))
          } else {
            pendingTokens.push(...piece.tokens)
            const scan = matcher.push(piece.text)
            if (scan.emit.length > 0 || scan.stopped) {
              const tokens = scan.stopped ? [] : pendingTokens
              chunks.push(...text("answer", scan.emit, tokens))
              pendingTokens = []
            }
            if (scan.stopped) return { chunks, stopped: true }
          }
          lastChannel = piece.channel
        }
        return { chunks, stopped: false }
      }),
    finish: (): Either.Either<ReadonlyArray<GenerateChunk>, ChannelDecoder.MalformedChannel> =>
      Either.map(decoder.finish(), () => flushAnswer())
  }
}

