/**
 * The output-channel decoder: splits a generation's tokens into the thought, answer and
 * tool-call channels by the model's control tokens. Marker tokens are consumed, never emitted;
 * a malformed boundary (an unmatched closer, a nested opener, the other channel's closer, a
 * channel still open when the model ends its output) is a typed `MalformedChannel` rather than
 * markers leaking into the answer. A channel still open when a token limit ends the output was
 * cut, not malformed (`truncate`). Pure: `make` is a synchronous state machine for one consumer, `decodeChannels`
 * the same machine as a Stream combinator for the Provider.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"

/** Where a piece of output belongs. `answer` is the default channel. */
export const Channel = Schema.Literal("thought", "answer", "tool")
export type Channel = typeof Channel.Type

/** The channels a marker opens; `answer` is never opened, only returned to. */
export const OpenChannel = Schema.Literal("thought", "tool")
export type OpenChannel = typeof OpenChannel.Type

/** The four control tokens, named as in `SpecialTokens`. */
export const Marker = Schema.Literal("thinkOpen", "thinkClose", "toolOpen", "toolClose")
export type Marker = typeof Marker.Type

/**
 * The marker ids the decoder needs; `SpecialTokens` from `src/native/Protocol.ts` fits. A null id
 * is a marker the model lacks: a channel without its opener never opens. Every known id is a
 * marker, so an opener whose closer is null can only end in an `unterminated` failure.
 */
export interface ChannelTokens {
  readonly thinkOpen: number | null
  readonly thinkClose: number | null
  readonly toolOpen: number | null
  readonly toolClose: number | null
}

/** One plain token's output, tagged with its channel. */
export const ChannelPiece = Schema.Struct({
  /** The channel that was current when the token arrived. */
  channel: Channel,
  /** The token's decoded text. */
  text: Schema.String,
  /** The token ids behind `text`; never a marker id. */
  tokens: Schema.Array(Schema.NonNegativeInt)
})
export interface ChannelPiece extends Schema.Schema.Type<typeof ChannelPiece> {}

/** A generated token as the engine streams it. */
export interface GeneratedToken {
  /** Position in the generated output, from 0. */
  readonly index: number
  readonly token: number
  readonly text: string
}

/** A piece together with the index of the generated token behind it. */
export interface IndexedChannelPiece extends ChannelPiece {
  readonly index: number
}

/** Each marker's text in the model's vocabulary. */
export const markerText: Record<Marker, string> = {
  thinkOpen: "<think>",
  thinkClose: "</think>",
  toolOpen: "<tool_call>",
  toolClose: "</tool_call>"
}

const reasonText = {
  unmatchedCloser: "unmatched closer",
  nestedOpener: "nested opener",
  crossCloser: "closer of the other channel",
  unterminated: "unterminated channel"
} as const

/**
 * A malformed channel boundary in generated output. For `unterminated`, the token, marker and
 * index are those of the opener that was never closed.
 */
export class MalformedChannel extends Schema.TaggedError<MalformedChannel>()("MalformedChannel", {
  reason: Schema.Literal("unmatchedCloser", "nestedOpener", "crossCloser", "unterminated"),
  /** The offending marker's token id. */
  token: Schema.NonNegativeInt,
  marker: Marker,
  /** The marker's index in the generated output. */
  index: Schema.NonNegativeInt,
  /** The channel that was open at the marker; null when none was (the answer channel). */
  open: Schema.NullOr(OpenChannel)
}) {
  override get message() {
    const at = `${markerText[this.marker]} (token ${this.token}) at index ${this.index}`
    return this.reason === "unterminated"
      ? `${reasonText.unterminated}: ${this.open} channel opened by ${at} is still open at the end of generation`
      : `${reasonText[this.reason]} ${at} while ${this.open === null ? "no channel" : `the ${this.open} channel`} was open`
  }
}

/** The decoder's state between tokens: the open channel and the opener that opened it. */
export interface DecoderState {
  readonly open: null | { readonly channel: OpenChannel; readonly token: number; readonly index: number }
}

export const initial: DecoderState = { open: null }

const opens: Partial<Record<Marker, OpenChannel>> = { thinkOpen: "thought", toolOpen: "tool" }
const closes: Partial<Record<Marker, OpenChannel>> = { thinkClose: "thought", toolClose: "tool" }

type Transition = (
  state: DecoderState,
  index: number,
  token: number,
  text: string
) => Either.Either<readonly [DecoderState, ReadonlyArray<ChannelPiece>], MalformedChannel>

/** The pure transition function for one model's markers (ids listed first win on a clash). */
export const transition = (special: ChannelTokens): Transition => {
  const markers = new Map<number, Marker>()
  for (const marker of Marker.literals) {
    const id = special[marker]
    if (id !== null && !markers.has(id)) markers.set(id, marker)
  }
  return (state, index, token, text) => {
    const marker = markers.get(token)
    if (marker === undefined) {
      const channel: Channel = state.open?.channel ?? "answer"
      return Either.right([state, [{ channel, text, tokens: [token] }]] as const)
    }
    const open = state.open?.channel ?? null
    const fail = (reason: MalformedChannel["reason"]) =>
      Either.left(new MalformedChannel({ reason, token, marker, index, open }))
    const opened = opens[marker]
    if (opened !== undefined) {
      return open === null
        ? Either.right([{ open: { channel: opened, token, index } }, []] as const)
        : fail("nestedOpener")
    }
    if (open === null) return fail("unmatchedCloser")
    return closes[marker] === open ? Either.right([initial, []] as const) : fail("crossCloser")
  }
}

/** The end of generation: fails if a channel is still open. */
export const end = (state: DecoderState): Either.Either<void, MalformedChannel> => {
  const open = state.open
  if (open === null) return Either.void
  return Either.left(
    new MalformedChannel({
      reason: "unterminated",
      token: open.token,
      marker: open.channel === "thought" ? "thinkOpen" : "toolOpen",
      index: open.index,
      open: open.channel
    })
  )
}

/** A stateful decoder for one generation. */
export interface ChannelDecoder {
  /**
   * Feeds the next generated token; its index is the count of tokens pushed before it. A plain
   * token yields one piece, a marker none. After a failure every later call fails the same way.
   */
  readonly push: (token: number, text: string) => Either.Either<ReadonlyArray<ChannelPiece>, MalformedChannel>
  /** Ends the generation; fails with reason `unterminated` if a channel is still open. */
  readonly finish: () => Either.Either<void, MalformedChannel>
  /**
   * Ends the generation at a token limit: a channel still open was cut short, which is not a
   * malformed boundary. Returns that channel (null when none was open).
   */
  readonly truncate: () => Either.Either<OpenChannel | null, MalformedChannel>
  /** The channel the next plain token would go to. */
  readonly channel: () => Channel
}

export const make = (special: ChannelTokens): ChannelDecoder => {
  const step = transition(special)
  let state = initial
  let index = 0
  let failed: MalformedChannel | null = null
  return {
    push: (token, text) => {
      if (failed !== null) return Either.left(failed)
      const result = step(state, index++, token, text)
      if (Either.isLeft(result)) {
        failed = result.left
        return Either.left(result.left)
      }
      state = result.right[0]
      return Either.right(result.right[1])
    },
    finish: () => (failed !== null ? Either.left(failed) : end(state)),
    truncate: () => (failed !== null ? Either.left(failed) : Either.right(state.open?.channel ?? null)),
    channel: () => state.open?.channel ?? "answer"
  }
}

type Accumulated = Either.Either<
  readonly [DecoderState, ReadonlyArray<IndexedChannelPiece>],
  MalformedChannel
>

const toEffect = <A>(either: Either.Either<A, MalformedChannel>): Effect.Effect<A, MalformedChannel> =>
  Either.match(either, { onLeft: Effect.fail, onRight: Effect.succeed })

/**
 * Decodes a stream of generated tokens into channel pieces, failing with `MalformedChannel` at
 * the first malformed boundary, or at the end if a channel is still open.
 */
export const decodeChannels = (special: ChannelTokens) => {
  const step = transition(special)
  return <E, R>(
    self: Stream.Stream<GeneratedToken, E, R>
  ): Stream.Stream<IndexedChannelPiece, E | MalformedChannel, R> =>
    self.pipe(
      Stream.map(Option.some),
      Stream.concat(Stream.succeed(Option.none<GeneratedToken>())),
      Stream.mapAccumEffect(initial, (state, next) =>
        toEffect(
          Option.match(next, {
            onNone: (): Accumulated => Either.map(end(state), () => [state, []] as const),
            onSome: ({ index, text, token }): Accumulated =>
              Either.map(step(state, index, token, text), ([after, pieces]) =>
                [after, pieces.map((piece) => ({ ...piece, index }))] as const)
          })
        )),
      Stream.flattenIterables
    )
}
