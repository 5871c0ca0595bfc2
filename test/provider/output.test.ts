/**
 * A generation's output through the Provider's output state, fed token sequences with the control
 * tokens of the generated vocabulary: channels are separated without markers leaking, malformed
 * boundaries are typed errors, stop strings end the answer (and only the answer), and the tokens
 * behind every emitted chunk are accounted for.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Either from "effect/Either"
import type { GenerateChunk } from "../../src/domain/Inference.js"
import { outputState } from "../../src/services/provider/Output.js"

const special = { thinkOpen: 5, thinkClose: 6, toolOpen: 7, toolClose: 8 }
const markers: Record<number, string> = { 5: "<think>", 6: "</think>", 7: "<tool_call>", 8: "</tool_call>" }

/**
 * Feeds (token, text) pairs; plain tokens are numbered from 100 with their text. `limitReached`:
 * the output ends at a token limit rather than by the model.
 */
const run = (pieces: ReadonlyArray<number | string>, stops: ReadonlyArray<string> = [], limitReached = false) => {
  const output = outputState(special, stops)
  const chunks: Array<GenerateChunk> = []
  let next = 100
  for (const piece of pieces) {
    const token = typeof piece === "number" ? piece : next++
    const result = output.token(token, typeof piece === "number" ? markers[piece]! : piece)
    if (Either.isLeft(result)) return Either.left(result.left)
    chunks.push(...result.right.chunks)
    if (result.right.stopped) return Either.right({ chunks, stopped: true, truncated: null })
  }
  return Either.map(output.finish(limitReached), (end) => ({ chunks: [...chunks, ...end.chunks], stopped: false, truncated: end.truncated }))
}

/** Text per channel, concatenated in order of appearance. */
const byChannel = (chunks: ReadonlyArray<GenerateChunk>) => {
  const out: Record<string, string> = {}
  for (const c of chunks) if (c._tag === "Text") out[c.channel] = (out[c.channel] ?? "") + c.text
  return out
}

describe("generation output: channels and stop strings", () => {
  it("separates thought, answer and tool output; no marker text leaks", () => {
    const result = Either.getOrThrow(run([5, "let", " me", " think", 6, "The", " answer", 7, "{\"name\":\"f\",", "\"arguments\":{}}", 8, " done"]))
    assert.deepStrictEqual(byChannel(result.chunks), {
      thought: "let me think",
      answer: "The answer done"
    })
    for (const c of result.chunks) if (c._tag === "Text") assert.notMatch(c.text, /<\/?(think|tool_call)>/)
    // Every plain token is behind exactly one chunk; markers are behind none.
    const tokens = result.chunks.flatMap((c) => (c._tag === "Done" ? [] : c.tokens))
    assert.deepStrictEqual(tokens, [100, 101, 102, 103, 104, 105, 106, 107])
  })

  it("a tool call is one ToolCall chunk with its parsed arguments, in order between the texts around it", () => {
    const output = outputState(special, [], (n) => `id-${n}`)
    const chunks: Array<GenerateChunk> = []
    let next = 100
    for (const piece of ["Let me check.", 7, "\n{\"name\": \"get_weather\",", " \"arguments\": {\"city\": \"Paris\"}}\n", 8]) {
      const token = typeof piece === "number" ? piece : next++
      chunks.push(...Either.getOrThrow(output.token(token, typeof piece === "number" ? markers[piece]! : piece)).chunks)
    }
    chunks.push(...Either.getOrThrow(output.finish(false)).chunks)
    assert.deepStrictEqual(chunks.map((c) => c._tag), ["Text", "ToolCall"])
    assert.deepStrictEqual(chunks[1], { _tag: "ToolCall", id: "id-0", name: "get_weather", arguments: { city: "Paris" }, tokens: [101, 102] })
    assert.isTrue(output.calledTools())
  })

  it("a malformed tool call is a MalformedToolCall chunk naming its text; the answer after it is kept", () => {
    const result = Either.getOrThrow(run([7, "{\"name\": \"get_weather\", \"arguments\": {\"city\"", 8, "Sorry", ", no call.", 7, 8]))
    assert.deepStrictEqual(result.chunks.map((c) => c._tag), ["MalformedToolCall", "Text", "Text", "MalformedToolCall"])
    const [broken, , , empty] = result.chunks
    assert(broken?._tag === "MalformedToolCall" && empty?._tag === "MalformedToolCall")
    assert.strictEqual(broken.text, "{\"name\": \"get_weather\", \"arguments\": {\"city\"")
    assert.match(broken.reason, /^not JSON/)
    assert.deepStrictEqual(broken.tokens, [100])
    assert.deepStrictEqual([empty.text, empty.tokens], ["", []])
    assert.strictEqual(byChannel(result.chunks).answer, "Sorry, no call.")
  })

  it("answer text held back for a stop string is released before a tool call opens", () => {
    const result = Either.getOrThrow(run(["a", " ST", 7, "{\"name\":\"f\"}", 8, "b"], ["STOP"]))
    const texts = result.chunks.map((c) => (c._tag === "Text" ? c.text : `|${c._tag}|`)).join("")
    assert.strictEqual(texts, "a ST|ToolCall|b")
  })

  it("rejects an unmatched closer, a nested opener and an unterminated channel with a typed error", () => {
    const unmatched = run(["hi", 6])
    assert.isTrue(Either.isLeft(unmatched))
    if (Either.isLeft(unmatched)) assert.deepStrictEqual([unmatched.left.reason, unmatched.left.index], ["unmatchedCloser", 1])
    const nested = run([5, "a", 5])
    if (Either.isLeft(nested)) assert.strictEqual(nested.left.reason, "nestedOpener")
    else assert.fail("nested opener accepted")
    const open = run([7, "call"])
    if (Either.isLeft(open)) {
      assert.strictEqual(open.left.reason, "unterminated")
      assert.match(open.left.message, /tool channel opened by <tool_call>/)
    } else assert.fail("unterminated channel accepted")
  })

  it("a stop string split across tokens ends the answer before it; the held-back text is released otherwise", () => {
    const stopped = Either.getOrThrow(run(["Hello", " wor", "ld", " END", "ING", " more"], [" ENDING"]))
    assert.isTrue(stopped.stopped)
    assert.strictEqual(byChannel(stopped.chunks).answer, "Hello world")
    // " END" was held (it could start the stop string); it was not emitted, nor were its tokens.
    const tokens = stopped.chunks.flatMap((c) => (c._tag === "Text" ? c.tokens : []))
    assert.deepStrictEqual(tokens, [100, 101, 102])
    const released = Either.getOrThrow(run(["Hello", " END", "ed"], [" ENDING"]))
    assert.isFalse(released.stopped)
    assert.strictEqual(byChannel(released.chunks).answer, "Hello ENDed")
  })

  it("stop strings apply to the answer only; held-back answer text is released when a channel opens", () => {
    const result = Either.getOrThrow(run(["a", " ST", 5, "STOP inside thought", 6, "b"], ["STOP"]))
    assert.isFalse(result.stopped)
    assert.deepStrictEqual(byChannel(result.chunks), { answer: "a STb", thought: "STOP inside thought" })
    // "a", " " (the "ST" that could start "STOP" is held), then "ST" released as the thought opens.
    assert.deepStrictEqual(result.chunks.map((c) => (c._tag === "Text" ? c.channel : c._tag)), ["answer", "answer", "answer", "thought", "answer"])
  })

  it("a token limit inside the thought or tool channel cuts it: its text is delivered and the channel named, no error", () => {
    const thought = Either.getOrThrow(run(["a", 5, "let", " me"], [], true))
    assert.deepStrictEqual(byChannel(thought.chunks), { answer: "a", thought: "let me" })
    assert.strictEqual(thought.truncated, "thought")
    const tool = Either.getOrThrow(run([7, "{\"na"], [], true))
    // A call cut short is given as it stands: a MalformedToolCall naming its text.
    assert.deepStrictEqual(
      [tool.chunks.map((c) => (c._tag === "MalformedToolCall" ? c.text : c._tag)), tool.truncated],
      [["{\"na"], "tool"]
    )
    const answer = Either.getOrThrow(run([5, "x", 6, "y"], [], true))
    assert.strictEqual(answer.truncated, null)
    // The model ending its output with the channel open is still malformed, and a malformed
    // boundary before the limit stays malformed at the limit.
    const ended = run(["a", 5, "let"], [], false)
    if (Either.isLeft(ended)) assert.strictEqual(ended.left.reason, "unterminated")
    else assert.fail("unterminated channel accepted at the end of generation")
    const malformed = run(["a", 6, "b"], [], true)
    if (Either.isLeft(malformed)) assert.strictEqual(malformed.left.reason, "unmatchedCloser")
    else assert.fail("unmatched closer accepted")
  })
})

describe("generation output: per-token probabilities", () => {
  /** Feeds plain texts and markers with a probability and one candidate per token; the chunks out. */
  const scoredRun = (pieces: ReadonlyArray<number | string>, stops: ReadonlyArray<string>, report: { probabilities: boolean; candidates: boolean }) => {
    const output = outputState(special, stops, undefined, report)
    const chunks: Array<GenerateChunk> = []
    let next = 100
    for (const piece of pieces) {
      const token = typeof piece === "number" ? piece : next++
      const text = typeof piece === "number" ? markers[piece]! : piece
      const result = Either.getOrThrow(output.token(token, text, token / 1000, [{ token, text, probability: token / 1000 }]))
      chunks.push(...result.chunks)
      if (result.stopped) return chunks
    }
    return [...chunks, ...Either.getOrThrow(output.finish(false)).chunks]
  }
  const texts = (chunks: ReadonlyArray<GenerateChunk>) => chunks.filter((c) => c._tag === "Text")

  it("every list is aligned with the chunk's tokens, also where held-back text merges tokens; markers have no entry", () => {
    const chunks = scoredRun([5, "let", " me", 6, "Hel", "lo", " ST", "op", 7, "{}", 8, "end"], ["Hello there"], { probabilities: true, candidates: true })
    for (const chunk of texts(chunks)) {
      assert.deepStrictEqual(chunk.probabilities, chunk.tokens.map((t) => t / 1000))
      assert.strictEqual(chunk.tokenTexts?.join(""), chunk.text)
      assert.deepStrictEqual(chunk.candidates?.map((c) => c[0]!.token), chunk.tokens)
    }
    // "Hel", "Hello" could start "Hello there": they wait for " ST", then all three go out as one chunk.
    const merged = texts(chunks).find((c) => c.text === "Hello ST")
    assert.deepStrictEqual(merged?.tokenTexts, ["Hel", "lo", " ST"])
    assert.deepStrictEqual(texts(chunks).flatMap((c) => c.tokens), [100, 101, 102, 103, 104, 105, 107])
  })

  it("probabilities without candidates, and nothing per token when not asked", () => {
    const pieces = ["a", 5, "b", 6, "c"]
    for (const chunk of texts(scoredRun(pieces, [], { probabilities: true, candidates: false }))) {
      assert.strictEqual(chunk.probabilities?.length, 1)
      assert.deepStrictEqual(chunk.tokenTexts, [chunk.text])
      assert.isUndefined(chunk.candidates)
    }
    for (const chunk of texts(scoredRun(pieces, [], { probabilities: false, candidates: false }))) {
      assert.deepStrictEqual(Object.keys(chunk).sort(), ["_tag", "channel", "text", "tokens"])
    }
  })
})
