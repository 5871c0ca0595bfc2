import { assert, describe, it } from "@effect/vitest"
import type { DecideResult, GenerateChunk, Readiness } from "../../src/domain/Inference.js"
import * as Format from "../../src/cli/Format.js"

const plain: Format.Style = { color: false }
const color: Format.Style = { color: true }

const text = (channel: "thought" | "answer" | "tool", value: string): GenerateChunk => ({
  _tag: "Text",
  channel,
  text: value,
  tokens: [1]
})

const done: GenerateChunk = {
  _tag: "Done",
  stopReason: "maxTokens",
  usage: { promptTokens: 57, reusedTokens: 51, generatedTokens: 32, reuse: "continuation" },
  timings: { queueMillis: 2, firstTokenMillis: 41.2, decodeTokensPerSecond: 88.06, totalMillis: 404 },
  checkpoint: { conversation: "c1", tokens: 89, hash: "abc" }
}

const renderAll = (chunks: ReadonlyArray<GenerateChunk>, options: Parameters<typeof Format.renderChunk>[2]) => {
  let state = Format.initialChunkRenderState
  let out = ""
  for (const chunk of chunks) {
    const [o, s] = Format.renderChunk(state, chunk, options)
    out += o
    state = s
  }
  return out
}

describe("Format", () => {
  it("formats bytes, rates and durations", () => {
    assert.strictEqual(Format.formatBytes(0), "0 B")
    assert.strictEqual(Format.formatBytes(1023), "1023 B")
    assert.strictEqual(Format.formatBytes(1536), "1.5 KiB")
    assert.strictEqual(Format.formatBytes(744096), "726.7 KiB")
    assert.strictEqual(Format.formatBytes(3 * 1024 ** 3), "3.0 GiB")
    assert.strictEqual(Format.formatRate(1024 * 1024, 1000), "1.0 MiB/s")
    assert.strictEqual(Format.formatRate(10, 0), "-")
    assert.strictEqual(Format.formatDuration(840.4), "840 ms")
    assert.strictEqual(Format.formatDuration(2400), "2.4 s")
    assert.strictEqual(Format.formatDuration(192_000), "3 min 12 s")
  })

  it("draws a progress line with bar, percentage, bytes and rate", () => {
    const line = Format.progressLine({ label: "tiny", bytes: 297_639, total: 744_096, elapsedMillis: 250 }, 20)
    assert.strictEqual(line, "tiny  [########............]  40%  290.7 KiB / 726.7 KiB  1.1 MiB/s")
    const full = Format.progressLine({ label: "x", bytes: 10, total: 10, elapsedMillis: 1000 }, 4)
    assert.strictEqual(full, "x  [####] 100%  10 B / 10 B  10 B/s")
    assert.strictEqual(Format.progressLine({ label: "x", bytes: 5, total: 0, elapsedMillis: 0 }), "x  5 B  -")
  })

  it("renders answer text as is and closes with a line break", () => {
    assert.strictEqual(
      renderAll([text("answer", "Hello"), text("answer", " world"), done], { thoughts: "show", style: plain }),
      "Hello world\n"
    )
  })

  it("dims thoughts on a terminal, marks them without colour, hides them on request", () => {
    const chunks = [text("thought", "hmm"), text("answer", "Yes"), done]
    assert.strictEqual(renderAll(chunks, { thoughts: "show", style: color }), "\x1b[2mhmm\x1b[22m\nYes\n")
    assert.strictEqual(renderAll(chunks, { thoughts: "show", style: plain }), "[thought] hmm\nYes\n")
    assert.strictEqual(renderAll(chunks, { thoughts: "hide", style: color }), "Yes\n")
    assert.strictEqual(renderAll([text("thought", "only"), done], { thoughts: "hide", style: plain }), "")
  })

  it("drops line breaks at a channel's edges (Qwen3's <think>\\n…\\n</think>\\n\\n), keeps those inside", () => {
    const qwen = [text("thought", "Let me"), text("thought", " think.\n"), text("answer", "\n\n"), text("answer", "Hello"), text("answer", "!\n"), done]
    assert.strictEqual(renderAll(qwen, { thoughts: "show", style: plain }), "[thought] Let me think.\nHello!\n")
    assert.strictEqual(renderAll(qwen, { thoughts: "show", style: color }), "\x1b[2mLet me\x1b[22m\x1b[2m think.\x1b[22m\nHello!\n")
    assert.strictEqual(renderAll(qwen, { thoughts: "hide", style: plain }), "Hello!\n")
    const inside = [text("thought", "\none\n"), text("thought", "\ntwo"), text("answer", "a\n\n"), text("answer", "b"), done]
    assert.strictEqual(renderAll(inside, { thoughts: "show", style: plain }), "[thought] one\n\ntwo\na\n\nb\n")
  })

  it("shows a tool call as a line of its own, name and JSON arguments; a malformed one with its reason and text", () => {
    const call: GenerateChunk = { _tag: "ToolCall", id: "c0", name: "get_weather", arguments: { city: "Paris" }, tokens: [2] }
    const malformed: GenerateChunk = { _tag: "MalformedToolCall", text: "{\"name\": \x1b", reason: "not JSON", tokens: [3] }
    assert.strictEqual(
      renderAll([text("answer", "Checking."), call, done], { thoughts: "show", style: plain }),
      "Checking.\n[tool call] get_weather {\"city\":\"Paris\"}\n"
    )
    assert.strictEqual(
      renderAll([call, text("answer", "Done.")], { thoughts: "show", style: color }),
      "\x1b[1m[tool call]\x1b[22m get_weather {\"city\":\"Paris\"}\nDone."
    )
    assert.strictEqual(
      renderAll([malformed, done], { thoughts: "show", style: plain }),
      "[malformed tool call: not JSON] {\"name\": \u241b\n"
    )
  })

  it("shows control characters in generated text as visible pictures", () => {
    assert.strictEqual(Format.printable("a\u0014b\x1b[31mc\td\ne\u007f\u009b"), "a\u2414b\u241b[31mc\td\ne\u2421\ufffd")
    assert.strictEqual(
      renderAll([text("answer", "\x1b]0;pwned\x07"), done], { thoughts: "show", style: plain }),
      "\u241b]0;pwned\u2407\n"
    )
  })

  it("summarises a Done chunk", () => {
    assert.strictEqual(
      Format.doneSummary(done as Extract<GenerateChunk, { _tag: "Done" }>),
      "32 tokens · prompt 57 (51 reused: continuation) · first token 41 ms · 88.1 tok/s · total 404 ms · stop: maxTokens"
    )
    assert.match(
      Format.doneSummary({ ...done, truncatedChannel: "thought" } as Extract<GenerateChunk, { _tag: "Done" }>),
      / · stop: maxTokens \(thought cut short\)$/
    )
  })

  it("encodes JSON events in the wire form, with the conversation id", () => {
    const line = Format.jsonEvent(done, "c1")
    const parsed = JSON.parse(line)
    assert.strictEqual(parsed._tag, "Done")
    assert.strictEqual(parsed.usage.reuse, "continuation")
    assert.deepStrictEqual(parsed.checkpoint, { conversation: "c1", tokens: 89, hash: "abc" })
    assert.strictEqual(parsed.conversation, "c1")
    assert.isFalse(line.includes("\n"))
    assert.deepStrictEqual(JSON.parse(Format.jsonEvent(text("answer", "a\nb"))), {
      _tag: "Text",
      channel: "answer",
      text: "a\nb",
      tokens: [1]
    })
  })

  it("lays out the decision table by rank", () => {
    const result: DecideResult = {
      heads: [{
        name: "sentiment",
        labels: [
          { label: "negative", probability: 0.25, rank: 2, logLikelihood: -2.5 },
          { label: "positive", probability: 0.75, rank: 1, logLikelihood: -1.25 }
        ]
      }],
      promptTokens: 12,
      queueMillis: 1,
      totalMillis: 30
    }
    assert.strictEqual(
      Format.decideTable(result),
      [
        "head       label     probability  rank  log-likelihood",
        "sentiment  positive        75.0%     1          -1.250",
        "sentiment  negative        25.0%     2          -2.500"
      ].join("\n")
    )
    assert.strictEqual(Format.formatProbability(0.00001234), "0.0012%")
    assert.strictEqual(Format.formatProbability(0.999), "99.9%")
  })

  it("summarises readiness", () => {
    const readiness: Readiness = {
      state: "ready",
      reason: null,
      engine: { incarnation: 1, pid: 4242, backend: "cpu", nodeLlamaCppVersion: "3.21.1", uptimeMillis: 2500 },
      budget: {
        device: "cpu",
        kind: "cpu",
        source: "inventory",
        totalBytes: 8 * 1024 ** 3,
        budgetBytes: 4 * 1024 ** 3,
        chargedBytes: 100 * 1024 ** 2,
        freeBytes: 3 * 1024 ** 3,
        waiting: 0,
        weightsBytes: 60 * 1024 ** 2,
        kvBytes: 40 * 1024 ** 2,
        workspaceBytes: 0
      },
      roles: [{
        role: "generation",
        model: "qwen-chat",
        modelPath: `/s/blobs/sha256/7d/${"7d".repeat(32)}`,
        manifestDigest: `sha256:${"ab".repeat(32)}`,
        revision: 1,
        admittedContext: 2048,
        contextCap: 4096,
        limitedBy: "trainedContext",
        weightsBytes: 60 * 1024 ** 2,
        kvBytes: 40 * 1024 ** 2
      }],
      scheduler: { running: 0, queued: 0, slots: 4, conversations: 1 },
      recoveryActions: []
    }
    const summary = Format.readinessSummary(readiness, plain)
    assert.include(summary, "state      ready")
    assert.include(summary, "incarnation 1, pid 4242, cpu, node-llama-cpp 3.21.1, up 2.5 s")
    assert.include(summary, "cpu (cpu, from inventory): 100.0 MiB charged of 4.0 GiB, 3.0 GiB free")
    assert.include(summary, "generation  sha256:7d7d7d7d7d7d         1     2048  4096  trainedContext  sha256:abababababab")
    const named = Format.readinessSummary(readiness, plain, new Map([[`sha256:${"ab".repeat(32)}`, "tiny"]]))
    assert.match(named, /\ngeneration {2}tiny {2}\s+1 {5}2048 {2}4096 {2}trainedContext {2}sha256:abababababab$/m)
    const built = Format.readinessSummary({ ...readiness, engine: { ...readiness.engine, build: "localBuild", threads: 2 } }, plain)
    assert.include(built, "incarnation 1, pid 4242, cpu (local build), 2 threads, node-llama-cpp 3.21.1, up 2.5 s")
    assert.strictEqual(Format.readinessLine(readiness), "ready (engine 1, pid 4242, cpu)")
    assert.notInclude(summary, "devices")
    // On a GPU: each device with its memory, the driver and the build the engine child loaded.
    const onGpu = Format.readinessSummary({
      ...readiness,
      engine: {
        ...readiness.engine,
        backend: "cuda",
        build: "localBuild",
        driverVersion: "580.159.04",
        devices: [{ name: "NVIDIA H200", kind: "gpu", totalBytes: 140 * 1024 ** 3, freeBytes: 139 * 1024 ** 3 }]
      }
    }, plain)
    assert.include(onGpu, "incarnation 1, pid 4242, cuda (local build), node-llama-cpp 3.21.1")
    assert.include(onGpu, "devices    NVIDIA H200 (140.0 GiB, 139.0 GiB free), driver 580.159.04\n")
    assert.strictEqual(
      Format.readinessLine({ ...readiness, state: "loading", reason: "loading tiny", engine: { ...readiness.engine, pid: null } }),
      "loading: loading tiny (engine 1, cpu)"
    )
  })

  it("colours only on a terminal without NO_COLOR", () => {
    assert.isTrue(Format.styleFor(true, {}).color)
    assert.isFalse(Format.styleFor(false, {}).color)
    assert.isFalse(Format.styleFor(true, { NO_COLOR: "1" }).color)
    assert.isFalse(Format.styleFor(true, { TERM: "dumb" }).color)
  })
})
