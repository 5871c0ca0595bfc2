/**
 * The OpenAI response shapes, over any generation's chunks (no engine): a chat streamed and the
 * same chat whole say the same thing (content, reasoning, tool calls with their index, finish
 * reason, usage), forced tool calls included; the completions stream's text and logprobs are the
 * whole completion's; llama-server timings add up and stay finite; the request mapping names
 * client fields.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as fc from "effect/FastCheck"
import type { GenerateChunk } from "../../src/domain/Inference.js"
import { chatCompletion, chatStream } from "../../src/http/openai/ChatResponse.js"
import { completion, completionStream } from "../../src/http/openai/CompletionResponse.js"
import { paramOf } from "../../src/http/openai/Errors.js"
import { chatRequest } from "../../src/http/openai/ToGenerate.js"
import { timingsOf, type Done } from "../../src/http/openai/Usage.js"

const tokens = fc.array(fc.nat({ max: 151_000 }), { minLength: 1, maxLength: 3 })
const probabilities = (n: number) => fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { minLength: n, maxLength: n })

const text: fc.Arbitrary<GenerateChunk> = fc.record({
  channel: fc.constantFrom("thought" as const, "answer" as const),
  text: fc.string(),
  tokens
}).chain((t) =>
  fc.record({ probabilities: probabilities(t.tokens.length), tokenTexts: fc.array(fc.string(), { minLength: t.tokens.length, maxLength: t.tokens.length }) })
    .map((p) => ({ _tag: "Text" as const, ...t, ...p, text: p.tokenTexts.join("") }))
)

const toolCall: fc.Arbitrary<GenerateChunk> = fc.record({
  _tag: fc.constant("ToolCall" as const),
  id: fc.uuid(),
  name: fc.stringMatching(/^[a-z_]{1,12}$/),
  arguments: fc.dictionary(fc.string(), fc.jsonValue()),
  tokens
})

const malformed: fc.Arbitrary<GenerateChunk> = fc.record({
  _tag: fc.constant("MalformedToolCall" as const),
  text: fc.string(),
  reason: fc.string(),
  tokens
})

const done: fc.Arbitrary<Done> = fc.record({
  prompt: fc.nat({ max: 40_000 }),
  reusedShare: fc.double({ min: 0, max: 1, noNaN: true }),
  generated: fc.nat({ max: 4000 }),
  queue: fc.nat({ max: 10_000 }),
  prefill: fc.nat({ max: 10_000 }),
  decode: fc.nat({ max: 100_000 }),
  stopReason: fc.constantFrom("maxTokens" as const, "endOfGeneration" as const, "stopString" as const, "toolCalls" as const),
  reuse: fc.constantFrom("continuation" as const, "prefix" as const, "restored" as const, "prepared" as const, "cold" as const)
}).map((d) => ({
  _tag: "Done" as const,
  stopReason: d.stopReason,
  usage: { promptTokens: d.prompt, reusedTokens: Math.floor(d.prompt * d.reusedShare), generatedTokens: d.generated, reuse: d.reuse },
  timings: {
    queueMillis: d.queue,
    firstTokenMillis: d.queue + d.prefill,
    decodeTokensPerSecond: d.decode === 0 ? 0 : (Math.max(0, d.generated - 1) * 1000) / d.decode,
    totalMillis: d.queue + d.prefill + d.decode
  }
}))

const meta = { id: "chatcmpl-x", created: 0, model: "m", logprobs: true }

/** A stream chunk of either API, as a client reads it. */
interface StreamEvent {
  readonly usage?: unknown
  readonly choices: ReadonlyArray<{
    readonly text?: string
    readonly delta?: {
      readonly content?: string
      readonly reasoning_content?: string
      readonly tool_calls?: ReadonlyArray<{ readonly index: number; readonly id: string; readonly function: { readonly name: string; readonly arguments: string } }>
    }
    readonly logprobs: { readonly content?: ReadonlyArray<unknown>; readonly tokens?: ReadonlyArray<string>; readonly text_offset?: ReadonlyArray<number> } | null
    readonly finish_reason: string | null
  }>
}

/** What the chunks of a stream say, put together as a client does. */
const assemble = (events: ReadonlyArray<object>) => {
  let content = ""
  let reasoning = ""
  const calls: Array<{ index: number; id: string; name: string; arguments: string }> = []
  const logprobs: Array<unknown> = []
  let finish: string | null = null
  let usage: unknown
  for (const event of events as ReadonlyArray<StreamEvent>) {
    if (event.usage !== undefined) usage = event.usage
    for (const choice of event.choices) {
      content += choice.delta?.content ?? ""
      reasoning += choice.delta?.reasoning_content ?? ""
      for (const call of choice.delta?.tool_calls ?? []) {
        calls.push({ index: call.index, id: call.id, name: call.function.name, arguments: call.function.arguments })
      }
      logprobs.push(...(choice.logprobs?.content ?? []))
      finish = choice.finish_reason ?? finish
    }
  }
  return { content, reasoning, calls, logprobs, finish, usage }
}

const chatAgrees = (chunks: ReadonlyArray<GenerateChunk>, end: Done, forcedToolCall: boolean) => {
  const whole = chatCompletion({ ...meta, forcedToolCall }, chunks, end)
  const stream = chatStream({ ...meta, forcedToolCall }, true)
  const streamed = assemble([stream.start, ...chunks.flatMap(stream.next), ...stream.next(end)])
  const [choice] = whole.choices
  assert.strictEqual(streamed.content, choice!.message.content ?? "")
  assert.strictEqual(streamed.reasoning, choice!.message.reasoning_content ?? "")
  assert.deepStrictEqual(
    streamed.calls.map(({ index, ...call }) => [index, call.name, call.arguments]),
    (choice!.message.tool_calls ?? []).map((call, i) => [i, call.function.name, call.function.arguments])
  )
  if (!forcedToolCall) assert.deepStrictEqual(streamed.calls.map((c) => c.id), (choice!.message.tool_calls ?? []).map((c) => c.id))
  assert.deepStrictEqual(streamed.logprobs, choice!.logprobs?.content ?? [])
  assert.strictEqual(streamed.finish, choice!.finish_reason)
  assert.deepStrictEqual(streamed.usage, whole.usage)
  return whole
}

describe("OpenAI response shapes", () => {
  it("a chat streamed and whole agree, for any chunks", () =>
    fc.assert(fc.property(fc.array(fc.oneof(text, toolCall, malformed), { maxLength: 12 }), done, (chunks, end) => {
      const whole = chatAgrees(chunks, end, false)
      const calls = chunks.filter((c) => c._tag === "ToolCall").length
      assert.strictEqual(whole.choices[0]!.message.tool_calls?.length ?? 0, calls)
      if (calls > 0) assert.strictEqual(whole.choices[0]!.finish_reason, end.stopReason === "maxTokens" ? "length" : "tool_calls")
    })))

  it("a forced tool call, streamed and whole, is one call when its JSON is complete, else content", () =>
    fc.assert(fc.property(
      fc.stringMatching(/^[a-z_]{1,12}$/),
      fc.dictionary(fc.string(), fc.jsonValue()),
      fc.nat({ max: 40 }),
      fc.boolean(),
      done,
      (name, args, cut, complete, end) => {
        const json = JSON.stringify({ name, arguments: args })
        const written = complete ? json : json.slice(0, Math.min(cut, json.length - 1))
        const pieces = written.match(/[\s\S]{1,5}/g) ?? []
        const chunks: Array<GenerateChunk> = pieces.map((piece) => ({ _tag: "Text", channel: "answer", text: piece, tokens: [1] }))
        const whole = chatAgrees(chunks, end, true)
        const [choice] = whole.choices
        if (complete) {
          assert.deepStrictEqual(choice!.message.tool_calls?.map((c) => [c.function.name, JSON.parse(c.function.arguments)]), [[name, JSON.parse(JSON.stringify(args))]])
          assert.isNull(choice!.message.content)
        } else {
          assert.isUndefined(choice!.message.tool_calls)
          assert.strictEqual(choice!.message.content, written)
        }
      }
    )))

  it("a completion streamed and whole agree: text, logprobs with offsets, finish reason, usage", () =>
    fc.assert(fc.property(fc.array(fc.oneof(text, toolCall, malformed), { maxLength: 12 }), done, (chunks, end) => {
      const whole = completion(meta, chunks, end)
      const next = completionStream(meta, true)
      const events = [...chunks.flatMap(next), ...next(end)] as ReadonlyArray<StreamEvent>
      const [choice] = whole.choices
      assert.strictEqual(events.flatMap((e) => e.choices.map((c) => c.text)).join(""), choice!.text)
      const streamed = events.flatMap((e) => e.choices.flatMap((c) => (c.logprobs === null ? [] : [c.logprobs])))
      assert.deepStrictEqual(streamed.flatMap((l) => l.tokens ?? []), choice!.logprobs!.tokens)
      assert.deepStrictEqual(streamed.flatMap((l) => l.text_offset ?? []), choice!.logprobs!.text_offset)
      for (const [i, offset] of choice!.logprobs!.text_offset.entries()) {
        const token = choice!.logprobs!.tokens[i]!
        assert.strictEqual(choice!.text.slice(offset, offset + token.length), token)
      }
      assert.deepStrictEqual(events.at(-1)?.usage, whole.usage)
    })))

  it("llama-server timings add up to the usage and are finite", () =>
    fc.assert(fc.property(done, (end) => {
      const t = timingsOf(end)
      assert.strictEqual(t.cache_n + t.prompt_n, end.usage.promptTokens)
      assert.strictEqual(t.predicted_n, end.usage.generatedTokens)
      for (const value of Object.values(t)) assert.isTrue(Number.isFinite(value) && value >= 0, `${value}`)
    })))

  it("Provider field names become the client's", () => {
    const chat = { maxTokens: "max_completion_tokens", messages: "messages", topProbabilities: "top_logprobs" }
    assert.strictEqual(paramOf("maxTokens", chat, undefined), "max_completion_tokens")
    assert.strictEqual(paramOf("sampling.topP", chat, undefined), "top_p")
    assert.strictEqual(paramOf("tools[3].name", chat, undefined), "tools[3].function.name")
    assert.strictEqual(paramOf("messages[2].toolCallId", chat, undefined), "messages[2].tool_call_id")
    assert.strictEqual(paramOf("responseFormat.schema/properties/a/pattern", chat, undefined), "response_format.json_schema.schema/properties/a/pattern")
    assert.strictEqual(paramOf("conversation", chat, "X-Nativegen-Conversation"), "X-Nativegen-Conversation")
    assert.strictEqual(paramOf("topProbabilities", { ...chat, topProbabilities: "logprobs" }, undefined), "logprobs")
  })

  it.effect("the chat mapping: developer is system, text parts joined, tool call arguments parsed, reasoning kept", () =>
    Effect.gen(function*() {
      const { request } = yield* chatRequest({
        messages: [
          { role: "developer", content: "Be brief." },
          { role: "user", content: [{ type: "text", text: "Hi " }, { type: "text", text: "there" }] },
          {
            role: "assistant",
            content: null,
            reasoning_content: "Call it.",
            tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: "{\"a\":1}" } }]
          },
          { role: "tool", tool_call_id: "c1", content: "2" }
        ],
        stop: "END",
        temperature: 0.5
      })
      assert.deepStrictEqual(request.messages, [
        { role: "system", content: "Be brief." },
        { role: "user", content: "Hi there" },
        { role: "assistant", content: "", reasoning: "Call it.", toolCalls: [{ id: "c1", name: "f", arguments: { a: 1 } }] },
        { role: "tool", content: "2", toolCallId: "c1" }
      ])
      assert.deepStrictEqual([request.stop, request.sampling, request.maxTokens], [["END"], { temperature: 0.5 }, undefined])
      const bad = yield* Effect.flip(chatRequest({
        messages: [{ role: "assistant", tool_calls: [{ function: { name: "f", arguments: "[1]" } }] }]
      }))
      assert.strictEqual(bad.refusal.param, "messages[0].tool_calls[0].function.arguments")
    }))
})
