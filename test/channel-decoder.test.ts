import { assert, describe, it } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as fc from "effect/FastCheck"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as ChannelDecoder from "../src/services/ChannelDecoder.js"
import type { Channel, ChannelPiece, ChannelTokens, OpenChannel } from "../src/services/ChannelDecoder.js"
import { MalformedChannel } from "../src/services/ChannelDecoder.js"

const special: ChannelTokens = { thinkOpen: 1, thinkClose: 2, toolOpen: 3, toolClose: 4 }
const none: ChannelTokens = { thinkOpen: null, thinkClose: null, toolOpen: null, toolClose: null }

type Tok = readonly [token: number, text: string]
const open = (ids: ChannelTokens, channel: OpenChannel): Tok => [
  (channel === "thought" ? ids.thinkOpen : ids.toolOpen) ?? -1,
  ""
]
const close = (ids: ChannelTokens, channel: OpenChannel): Tok => [
  (channel === "thought" ? ids.thinkClose : ids.toolClose) ?? -1,
  ""
]

/** Pushes every token and finishes; the pieces, or the first failure. */
const decode = (ids: ChannelTokens, tokens: ReadonlyArray<Tok>): Either.Either<Array<ChannelPiece>, MalformedChannel> => {
  const decoder = ChannelDecoder.make(ids)
  const pieces: Array<ChannelPiece> = []
  for (const [token, text] of tokens) {
    const pushed = decoder.push(token, text)
    if (Either.isLeft(pushed)) return Either.left(pushed.left)
    pieces.push(...pushed.right)
  }
  return Either.map(decoder.finish(), () => pieces)
}

const textOf = (pieces: ReadonlyArray<ChannelPiece>, channel: Channel) =>
  pieces.filter((piece) => piece.channel === channel).map((piece) => piece.text).join("")

const expectPieces = (ids: ChannelTokens, tokens: ReadonlyArray<Tok>) => {
  const result = decode(ids, tokens)
  if (Either.isLeft(result)) assert.fail(result.left.message)
  return result.right
}

const expectFailure = (ids: ChannelTokens, tokens: ReadonlyArray<Tok>) => {
  const result = decode(ids, tokens)
  if (Either.isRight(result)) assert.fail("expected MalformedChannel")
  return result.left
}

const t = (id: number, text: string): Tok => [id, text]

describe("ChannelDecoder: well-formed output", () => {
  it("separates a thought from the answer that follows it, dropping the markers", () => {
    const pieces = expectPieces(special, [
      open(special, "thought"),
      t(10, "I should"),
      t(11, " greet"),
      close(special, "thought"),
      t(12, "Hello"),
      t(13, " world")
    ])
    assert.deepStrictEqual(pieces, [
      { channel: "thought", text: "I should", tokens: [10] },
      { channel: "thought", text: " greet", tokens: [11] },
      { channel: "answer", text: "Hello", tokens: [12] },
      { channel: "answer", text: " world", tokens: [13] }
    ])
  })

  it("streams a tool call in the tool channel between answer text", () => {
    const pieces = expectPieces(special, [
      t(10, "Let me check."),
      open(special, "tool"),
      t(20, "{\"name\":"),
      t(21, "\"clock\"}"),
      close(special, "tool"),
      t(11, " Done.")
    ])
    assert.strictEqual(textOf(pieces, "answer"), "Let me check. Done.")
    assert.strictEqual(textOf(pieces, "tool"), "{\"name\":\"clock\"}")
    assert.strictEqual(textOf(pieces, "thought"), "")
  })

  it("follows several alternations, including empty channels", () => {
    const pieces = expectPieces(special, [
      open(special, "thought"),
      t(10, "a"),
      close(special, "thought"),
      t(11, "b"),
      open(special, "tool"),
      t(12, "c"),
      close(special, "tool"),
      open(special, "thought"),
      close(special, "thought"),
      open(special, "thought"),
      t(13, "d"),
      close(special, "thought"),
      t(14, "e")
    ])
    assert.deepStrictEqual(
      pieces.map((piece) => [piece.channel, piece.text]),
      [["thought", "a"], ["answer", "b"], ["tool", "c"], ["thought", "d"], ["answer", "e"]]
    )
  })

  it("reports the channel the next plain token would go to", () => {
    const decoder = ChannelDecoder.make(special)
    assert.strictEqual(decoder.channel(), "answer")
    decoder.push(3, "")
    assert.strictEqual(decoder.channel(), "tool")
    decoder.push(4, "")
    assert.strictEqual(decoder.channel(), "answer")
  })
})

describe("ChannelDecoder: malformed boundaries", () => {
  it("rejects an unmatched closer", () => {
    const error = expectFailure(special, [t(10, "hi"), close(special, "thought"), t(11, "x")])
    assert.deepStrictEqual(
      { ...error },
      { _tag: "MalformedChannel", reason: "unmatchedCloser", token: 2, marker: "thinkClose", index: 1, open: null }
    )
    assert.include(error.message, "unmatched closer </think> (token 2) at index 1")
    assert.strictEqual(expectFailure(special, [close(special, "tool")]).marker, "toolClose")
  })

  it("rejects a nested opener, of either channel", () => {
    const same = expectFailure(special, [open(special, "thought"), t(10, "x"), open(special, "thought")])
    assert.deepStrictEqual(
      { reason: same.reason, index: same.index, marker: same.marker, open: same.open },
      { reason: "nestedOpener", index: 2, marker: "thinkOpen", open: "thought" }
    )
    const other = expectFailure(special, [open(special, "tool"), open(special, "thought")])
    assert.deepStrictEqual(
      { reason: other.reason, index: other.index, token: other.token, open: other.open },
      { reason: "nestedOpener", index: 1, token: 1, open: "tool" }
    )
    assert.include(other.message, "the tool channel was open")
  })

  it("rejects the other channel's closer", () => {
    const error = expectFailure(special, [t(10, "a"), open(special, "tool"), t(11, "{"), close(special, "thought")])
    assert.deepStrictEqual(
      { reason: error.reason, index: error.index, token: error.token, marker: error.marker, open: error.open },
      { reason: "crossCloser", index: 3, token: 2, marker: "thinkClose", open: "tool" }
    )
  })

  it("rejects a channel still open at the end of generation, naming its opener", () => {
    const error = expectFailure(special, [t(10, "a"), open(special, "thought"), t(11, "hmm")])
    assert.deepStrictEqual(
      { reason: error.reason, index: error.index, token: error.token, marker: error.marker, open: error.open },
      { reason: "unterminated", index: 1, token: 1, marker: "thinkOpen", open: "thought" }
    )
    assert.include(error.message, "unterminated")
  })

  it("keeps failing the same way after a failure", () => {
    const decoder = ChannelDecoder.make(special)
    const first = decoder.push(4, "")
    assert.isTrue(Either.isLeft(first))
    const again = decoder.push(10, "a")
    const atEnd = decoder.finish()
    if (Either.isRight(first) || Either.isRight(again) || Either.isRight(atEnd)) assert.fail("expected failures")
    assert.strictEqual(again.left, first.left)
    assert.strictEqual(atEnd.left, first.left)
  })

  it("is a Schema tagged error that survives encoding", () => {
    const error = expectFailure(special, [open(special, "tool"), close(special, "thought")])
    const encoded = JSON.parse(JSON.stringify(Schema.encodeSync(MalformedChannel)(error)))
    const decoded = Schema.decodeUnknownSync(MalformedChannel)(encoded)
    assert.instanceOf(decoded, MalformedChannel)
    assert.strictEqual(decoded.message, error.message)
  })
})

describe("ChannelDecoder: models lacking the tokens", () => {
  it("puts everything in the answer when the model has no markers", () => {
    const pieces = expectPieces(none, [t(1, "a"), t(2, "b"), t(3, "c"), t(4, "d")])
    assert.deepStrictEqual(pieces.map((piece) => piece.channel), ["answer", "answer", "answer", "answer"])
    assert.strictEqual(textOf(pieces, "answer"), "abcd")
  })

  it("keeps the channel it has when the other is missing", () => {
    const toolOnly: ChannelTokens = { thinkOpen: null, thinkClose: null, toolOpen: 3, toolClose: 4 }
    const pieces = expectPieces(toolOnly, [t(1, "a"), t(3, ""), t(10, "{}"), t(4, ""), t(2, "b")])
    assert.strictEqual(textOf(pieces, "answer"), "ab")
    assert.strictEqual(textOf(pieces, "tool"), "{}")
    assert.strictEqual(textOf(pieces, "thought"), "")
  })

  it("an opener without a closer can only end unterminated", () => {
    const error = expectFailure({ ...special, thinkClose: null }, [t(1, ""), t(2, "x")])
    assert.strictEqual(error.reason, "unterminated")
  })
})

describe("ChannelDecoder.decodeChannels", () => {
  const tokens = (list: ReadonlyArray<Tok>) => Stream.fromIterable(list.map(([token, text], index) => ({ index, token, text })))

  it.effect("pipes engine tokens into indexed channel pieces", () =>
    Effect.gen(function*() {
      const pieces = yield* tokens([t(1, ""), t(10, "why"), t(2, ""), t(11, "ok")]).pipe(
        ChannelDecoder.decodeChannels(special),
        Stream.runCollect
      )
      assert.deepStrictEqual(Chunk.toReadonlyArray(pieces), [
        { channel: "thought", text: "why", tokens: [10], index: 1 },
        { channel: "answer", text: "ok", tokens: [11], index: 3 }
      ])
    }))

  it.effect("emits the pieces before a malformed boundary, then fails with it", () =>
    Effect.gen(function*() {
      const results = yield* tokens([t(10, "a"), t(2, ""), t(11, "b")]).pipe(
        ChannelDecoder.decodeChannels(special),
        Stream.either,
        Stream.runCollect
      )
      const [first, second] = Chunk.toReadonlyArray(results)
      assert.deepStrictEqual(first, Either.right({ channel: "answer", text: "a", tokens: [10], index: 0 }))
      assert.isTrue(second !== undefined && Either.isLeft(second) && second.left.reason === "unmatchedCloser")
      assert.strictEqual(results.length, 2)
    }))

  it.effect("fails at the end of the stream when a channel is still open", () =>
    Effect.gen(function*() {
      const error = yield* tokens([t(3, ""), t(10, "{")]).pipe(
        ChannelDecoder.decodeChannels(special),
        Stream.runDrain,
        Effect.flip
      )
      assert.strictEqual(error._tag, "MalformedChannel")
      assert.strictEqual(error.reason, "unterminated")
    }))

  it.effect("passes upstream failures through untouched", () =>
    Effect.gen(function*() {
      const error = yield* Stream.fail("engine gone" as const).pipe(
        ChannelDecoder.decodeChannels(special),
        Stream.runDrain,
        Effect.flip
      )
      assert.strictEqual(error, "engine gone")
    }))
})

// Properties over random marker ids (0..9), plain tokens (10+) and channel segments.

const markerIds = fc.uniqueArray(fc.integer({ min: 0, max: 9 }), { minLength: 4, maxLength: 4 }).map(
  ([thinkOpen, thinkClose, toolOpen, toolClose]): ChannelTokens => ({
    thinkOpen: thinkOpen!,
    thinkClose: thinkClose!,
    toolOpen: toolOpen!,
    toolClose: toolClose!
  })
)
const plain = fc.tuple(fc.integer({ min: 10, max: 500 }), fc.string({ maxLength: 4 }))
const segments = fc.array(
  fc.record({ channel: fc.constantFrom<Channel>("answer", "thought", "tool"), body: fc.array(plain, { maxLength: 5 }) }),
  { maxLength: 10 }
)
type Segments = ReadonlyArray<{ readonly channel: Channel; readonly body: ReadonlyArray<Tok> }>

/** The token sequence, with the channel open before each position (and after the last). */
const layOut = (ids: ChannelTokens, segs: Segments) => {
  const tokens: Array<Tok> = []
  const openBefore: Array<OpenChannel | null> = []
  const emit = (tok: Tok, state: OpenChannel | null) => {
    tokens.push(tok)
    openBefore.push(state)
  }
  for (const { body, channel } of segs) {
    if (channel === "answer") {
      body.forEach((tok) => emit(tok, null))
    } else {
      emit(open(ids, channel), null)
      body.forEach((tok) => emit(tok, channel))
      emit(close(ids, channel), channel)
    }
  }
  openBefore.push(null)
  return { tokens, openBefore }
}

const markersOf = (ids: ChannelTokens) => new Set([ids.thinkOpen, ids.thinkClose, ids.toolOpen, ids.toolClose])

/** Every marker that is malformed when the given channel is open, with the expected reason. */
const corruptions = (ids: ChannelTokens, state: OpenChannel | null) =>
  state === null
    ? [
      { marker: "thinkClose", token: ids.thinkClose!, reason: "unmatchedCloser" },
      { marker: "toolClose", token: ids.toolClose!, reason: "unmatchedCloser" }
    ] as const
    : [
      { marker: "thinkOpen", token: ids.thinkOpen!, reason: "nestedOpener" },
      { marker: "toolOpen", token: ids.toolOpen!, reason: "nestedOpener" },
      state === "thought"
        ? { marker: "toolClose", token: ids.toolClose!, reason: "crossCloser" }
        : { marker: "thinkClose", token: ids.thinkClose!, reason: "crossCloser" }
    ] as const

describe("ChannelDecoder properties", () => {
  it.prop("well-formed output: each channel's text is its segments' text, and no marker leaks", [markerIds, segments], ([ids, segs]) => {
    const pieces = expectPieces(ids, layOut(ids, segs).tokens)
    for (const channel of ["answer", "thought", "tool"] as const) {
      const expected = segs.filter((seg) => seg.channel === channel).flatMap((seg) => seg.body.map(([, text]) => text))
      assert.strictEqual(textOf(pieces, channel), expected.join(""), channel)
    }
    const markers = markersOf(ids)
    assert.isTrue(pieces.every((piece) => piece.tokens.every((token) => !markers.has(token))))
    assert.strictEqual(pieces.length, segs.reduce((n, seg) => n + seg.body.length, 0))
  })

  it.prop(
    "one corruption inserted: the decoder fails at exactly its index",
    [markerIds, segments, fc.nat(), fc.nat()],
    ([ids, segs, where, which]) => {
      const { openBefore, tokens } = layOut(ids, segs)
      const at = where % (tokens.length + 1)
      const state = openBefore[at] ?? null
      const options = corruptions(ids, state)
      const corruption = options[which % options.length]!
      const corrupted = [...tokens.slice(0, at), t(corruption.token, ""), ...tokens.slice(at)]
      const error = expectFailure(ids, corrupted)
      assert.deepStrictEqual(
        { reason: error.reason, index: error.index, token: error.token, marker: error.marker, open: error.open },
        { reason: corruption.reason, index: at, token: corruption.token, marker: corruption.marker, open: state }
      )
    }
  )

  it.effect.prop(
    "the stream combinator agrees with the stateful decoder",
    [markerIds, segments, fc.option(fc.nat(), { nil: undefined })],
    ([ids, segs, cut]) =>
      Effect.gen(function*() {
        const all = layOut(ids, segs).tokens
        const list = cut === undefined ? all : all.slice(0, cut % (all.length + 1))
        const streamed = yield* Stream.fromIterable(list.map(([token, text], index) => ({ index, token, text }))).pipe(
          ChannelDecoder.decodeChannels(ids),
          Stream.map(({ index: _, ...piece }) => piece),
          Stream.runCollect,
          Effect.map(Chunk.toArray),
          Effect.either
        )
        assert.deepStrictEqual(streamed, decode(ids, list))
      })
  )
})
