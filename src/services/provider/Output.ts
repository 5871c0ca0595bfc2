/**
 * A generation's output, token by token: control tokens split it into channels (thought, answer,
 * tool; a malformed boundary is a typed error), stop strings end the answer (the stop string is
 * never emitted; see StopStrings.ts), and each Text chunk carries the tokens behind its text.
 * Stop strings apply to the answer channel only: thought and tool output pass through whole.
 * A token limit that ends the output inside the thought or tool channel cuts it (reported with
 * the channel), it does not make it malformed.
 * The tool channel is not streamed as text: each closed `<tool_call>` becomes one ToolCall chunk
 * (name and parsed arguments) or, when its text is not a call, one MalformedToolCall chunk naming
 * the text, and the output goes on (see ToolCalls.ts). A call cut by the token limit is given as
 * it stands: a MalformedToolCall unless its text already parses.
 * When the request asked for probabilities, each Text chunk carries per token (aligned with its
 * `tokens`) its probability and its own text, and with top probabilities its candidates.
 */
import * as Either from "effect/Either"
import type { Channel, GenerateChunk, TokenCandidate } from "../../domain/Inference.js"
import * as ChannelDecoder from "../ChannelDecoder.js"
import * as StopStrings from "./StopStrings.js"
import { parseToolCall } from "./ToolCalls.js"

/** A token's id, its text and, when asked for, its probability and the step's candidates. */
interface Scored {
  readonly token: number
  readonly text: string
  readonly probability: number | undefined
  readonly candidates: ReadonlyArray<TokenCandidate> | undefined
}

/** What the request asked to see per token. */
export interface TokenReport {
  /** Each token's probability and text. */
  readonly probabilities: boolean
  /** The most probable tokens at each step (the engine sends them when asked for). */
  readonly candidates: boolean
}

const noReport: TokenReport = { probabilities: false, candidates: false }

/**
 * Per-generation output state: channels, stop strings, the tokens behind text not yet emitted, the
 * tool call being read. `toolCallId` names the n-th tool call (from 0); `report` says what Text
 * chunks carry per token beside its id.
 */
export const outputState = (
  special: ChannelDecoder.ChannelTokens,
  stops: ReadonlyArray<string>,
  toolCallId: (n: number) => string = (n) => `call-${n}`,
  report: TokenReport = noReport
) => {
  const decoder = ChannelDecoder.make(special)
  const matcher = StopStrings.make(stops)
  let pending: Array<Scored> = []
  let lastChannel: Channel = "answer"
  /** The text and tokens of the open tool call. */
  let call = { text: "", tokens: [] as Array<number> }
  /** Well-formed tool calls so far. */
  let calls = 0

  const closeCall = (): GenerateChunk => {
    const { text: callText, tokens } = call
    call = { text: "", tokens: [] }
    return Either.match(parseToolCall(callText), {
      onLeft: (reason): GenerateChunk => ({ _tag: "MalformedToolCall", text: callText, reason, tokens }),
      onRight: (parsed): GenerateChunk => {
        return { _tag: "ToolCall", id: toolCallId(calls++), name: parsed.name, arguments: parsed.arguments, tokens }
      }
    })
  }
  const text = (channel: Channel, value: string, scored: ReadonlyArray<Scored>): ReadonlyArray<GenerateChunk> => {
    if (value.length === 0 && scored.length === 0) return []
    const tokens = scored.map((s) => s.token)
    if (!report.probabilities) return [{ _tag: "Text", channel, text: value, tokens }]
    const tokenTexts = scored.map((s) => s.text)
    const probabilities = scored.flatMap((s) => (s.probability === undefined ? [] : [s.probability]))
    // The engine reports a probability for every token it was asked to; never a misaligned list.
    const scores = probabilities.length === scored.length ? { probabilities, tokenTexts } : { tokenTexts }
    return [
      report.candidates
        ? { _tag: "Text", channel, text: value, tokens, ...scores, candidates: scored.map((s) => s.candidates ?? []) }
        : { _tag: "Text", channel, text: value, tokens, ...scores }
    ]
  }

  /** Stop strings apply to the answer channel; held-back answer text is released when the channel changes. */
  const flushAnswer = (): ReadonlyArray<GenerateChunk> => {
    const rest = matcher.flush()
    const scored = pending
    pending = []
    return text("answer", rest, scored)
  }

  return {
    /**
     * Chunks for one generated token (with its probability and the step's candidates, when asked
     * for), and whether a stop string ended the output.
     */
    token: (
      token: number,
      value: string,
      probability?: number,
      candidates?: ReadonlyArray<TokenCandidate>
    ): Either.Either<{ chunks: ReadonlyArray<GenerateChunk>; stopped: boolean }, ChannelDecoder.MalformedChannel> =>
      Either.map(decoder.push(token, value), (pieces) => {
        const chunks: Array<GenerateChunk> = []
        for (const piece of pieces) {
          const scored = piece.tokens.map((t): Scored => ({ token: t, text: value, probability, candidates }))
          if (piece.channel === "tool") {
            call.text += piece.text
            call.tokens.push(...piece.tokens)
          } else if (piece.channel !== "answer") {
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
        // Markers yield no pieces: a tool call opens and closes with its marker tokens.
        const channel = decoder.channel()
        if (channel === "tool" && lastChannel !== "tool") {
          if (lastChannel === "answer") chunks.push(...flushAnswer())
          lastChannel = "tool"
        } else if (channel !== "tool" && lastChannel === "tool") {
          chunks.push(closeCall())
          lastChannel = channel
        }
        return { chunks, stopped: false }
      }),
    /** Whether the output holds a well-formed tool call (the turn then ends with `toolCalls`). */
    calledTools: (): boolean => calls > 0,
    /**
     * The end of the output: the held-back answer text, and the channel a token limit cut (null
     * when none). When the model ended its output itself, a channel still open is malformed.
     */
    finish: (
      limitReached: boolean
    ): Either.Either<{ chunks: ReadonlyArray<GenerateChunk>; truncated: ChannelDecoder.OpenChannel | null }, ChannelDecoder.MalformedChannel> =>
      limitReached
        ? Either.map(decoder.truncate(), (truncated) => ({
          chunks: truncated === "tool" ? [closeCall()] : flushAnswer(),
          truncated
        }))
        : Either.map(decoder.finish(), () => ({ chunks: flushAnswer(), truncated: null }))
  }
}
