/**
 * The peer benchmark's outputs: the result schema (every figure survives a JSON round trip), the
 * target rule, the Markdown table and the SVG chart, and the server-sent-event splitting of its
 * HTTP client.
 */
import { assert, describe, it } from "@effect/vitest"
import * as fc from "effect/FastCheck"
import { splitEvents } from "../../bench/peer/Http.js"
import * as Report from "../../bench/peer/Report.js"
import * as Result from "../../bench/peer/Result.js"
import { pairedRatio, summarize } from "../../bench/peer/Stats.js"

const figureOf = (id: string, ng: ReadonlyArray<number>, peer: ReadonlyArray<number>, target?: Result.Target) =>
  Result.figure({
    id,
    title: `figure ${id}`,
    unit: "tok/s",
    threads: 1,
    nativegen: summarize(ng),
    peerName: "llama-server",
    peer: summarize(peer),
    ratio: pairedRatio(ng, peer),
    ...(target === undefined ? {} : { target })
  })

const resultOf = (figures: ReadonlyArray<Result.Figure>): Result.PeerResult => ({
  schema: 1,
  startedAt: "2026-12-03T10:00:00.000Z",
  finishedAt: "2026-12-03T10:20:00.000Z",
  gitRevision: "0123456789abcdef0123456789abcdef01234567",
  settings: { rounds: 2, quick: false, threads: [1, 2], model: "qwen-bench", modelDigest: `sha256:${"a".repeat(64)}`, contextSize: 8192 },
  machine: { cpu: "Test CPU", logicalCpus: 2, memoryBytes: 8 * 2 ** 30, os: "Linux 6", node: "v20.0.0" },
  versions: { nativegen: "0.1.0", nodeLlamaCpp: "3.21.1", llamaCppRelease: "v0.4.0", llamaServer: { cpuVariant: "zen4", cmakeArguments: ["-DGGML_NATIVE=OFF"] } },
  load: { before: "3.00 2.00 1.00 1/100 1", after: "3.50 2.50 1.50 1/100 2" },
  figures,
  skipped: [{ id: "admission.charge", reason: "not measured" }]
})

const positive = fc.double({ min: 1e-2, max: 1e4, noNaN: true })
const rounds = fc.array(positive, { minLength: 1, maxLength: 4 })

describe("bench/peer Result and Report", () => {
  it("a target is met by the ratio's median, or by nativegen's own median when it says so", () => {
    assert.isTrue(figureOf("a", [100, 110], [100, 100], { comparison: "atLeast", value: 1 }).met)
    assert.isFalse(figureOf("b", [90, 95], [100, 100], { comparison: "atLeast", value: 1 }).met)
    assert.isTrue(figureOf("c", [40, 60], [100, 100], { comparison: "atMost", value: 0.5 }).met)
    assert.isFalse(figureOf("d", [500, 700], [1, 1], { comparison: "atMost", value: 500, on: "nativegen" }).met)
    assert.isUndefined(figureOf("e", [1], [1]).met)
  })

  it.prop("every result survives encoding to JSON and decoding back", [fc.array(fc.tuple(rounds, rounds), { maxLength: 5 })], ([pairs]) => {
    const figures = pairs.map(([a, b], i) => {
      const n = Math.min(a.length, b.length)
      return figureOf(String(i), a.slice(0, n), b.slice(0, n), { comparison: "atLeast", value: 1 })
    })
    const result = resultOf(figures)
    assert.deepStrictEqual(Result.decode(Result.encode(result)), result)
  })

  it("a result whose figure lacks its ratio is refused when read", () => {
    const text = Result.encode(resultOf([figureOf("a", [1], [1])])).replace("\"ratio\"", "\"ratio_\"")
    assert.throws(() => Result.decode(text))
  })

  it("the table has a row per figure: both sides with unit and range, the ratio, the target, whether met", () => {
    const md = Report.markdown(resultOf([
      figureOf("decode", [90, 100], [100, 100], { comparison: "atLeast", value: 0.97 }),
      figureOf("oneshot", [3000, 3200], [50, 60], { comparison: "atMost", value: 500, on: "nativegen" })
    ]))
    assert.include(md, "| figure | nativegen | peer | ratio | target | met |")
    assert.include(md, "| figure decode (1 thread) | 95.0 tok/s (90.0–100) | 100 tok/s (llama-server) | 0.950 (0.900–1.00) | ≥ 0.970 | **no** |")
    assert.include(md, "nativegen ≤ 500 tok/s")
    assert.include(md, "Load average before: 3.00 2.00 1.00 1/100 1; after: 3.50 2.50 1.50 1/100 2.")
    assert.include(md, "- admission.charge: not measured")
  })

  it("a table cell never breaks the table: pipes are escaped", () => {
    const f = { ...figureOf("x", [1], [1]), title: "a | b" }
    assert.strictEqual(Report.tableRow(f).split(" | ").length, 6)
    assert.include(Report.tableRow(f), "a \\| b")
  })

  it("the chart: one labelled bar per figure, green when met and red when not, the 1.0 line and the targets", () => {
    const text = Report.svg(resultOf([
      figureOf("fast", [120], [100], { comparison: "atLeast", value: 1 }),
      figureOf("slow", [50], [100], { comparison: "atLeast", value: 0.97 }),
      figureOf("bare", [1], [1])
    ]))
    assert.match(text, /^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg"/)
    assert.strictEqual((text.match(/<rect x=/g) ?? []).length, 3)
    assert.include(text, "#2a9d3a")
    assert.include(text, "#d33")
    assert.include(text, "figure fast (1t)")
    assert.strictEqual((text.match(/stroke="#1f4fd1"/g) ?? []).length, 2)
    assert.match(text, /stroke="#000" stroke-width="1.5"/)
  })

  it.prop("the chart's axis holds every ratio within whole decades around 1.0", [fc.array(positive, { minLength: 1, maxLength: 10 })], ([values]) => {
    const { min, max } = Report.axisRange(values)
    return min <= 0.1 && max >= 10 && values.every((v) => v >= min && v <= max) &&
      Number.isInteger(Math.round(Math.log10(min) * 1e9) / 1e9) && Number.isInteger(Math.round(Math.log10(max) * 1e9) / 1e9)
  })

  it("server-sent events split into complete data payloads, keeping the unfinished rest", () => {
    const { payloads, rest } = splitEvents("data: {\"a\":1}\n\ndata: [DONE]\r\n\r\ndata: {\"b\"")
    assert.deepStrictEqual(payloads, ["{\"a\":1}", "[DONE]"])
    assert.strictEqual(rest, "data: {\"b\"")
  })

  it.prop("splitting events is the same however the stream is cut into pieces", [fc.array(fc.string({ unit: "grapheme-ascii", maxLength: 20 }).map((s) => s.replace(/[\r\n]/g, "")), { maxLength: 6 }), fc.nat({ max: 200 })], ([datas, cut]) => {
    const whole = datas.map((d) => `data: ${d}\n\n`).join("")
    const at = Math.min(cut, whole.length)
    const first = splitEvents(whole.slice(0, at))
    const second = splitEvents(first.rest + whole.slice(at))
    const all = splitEvents(whole)
    assert.deepStrictEqual([...first.payloads, ...second.payloads], all.payloads)
  })
})
