/**
 * Display width (issue 17): tables and progress lines are measured in terminal columns (CJK and
 * emoji 2, combining marks 0) and, given the terminal's width, no rendered line is wider.
 */
import { assert, describe, it } from "@effect/vitest"
import * as fc from "effect/FastCheck"
import * as Format from "../../src/cli/Format.js"
import * as Width from "../../src/cli/Width.js"

/** Text mixing ASCII, CJK, emoji (with ZWJ sequences and flags), combining marks and Latin with accents. */
const pieces = ["a", "Z", "7", " ", "-", "漢", "字", "カ", "한", "ｱ", "👍", "👨‍👩‍👧", "🇫🇷", "e\u0301", "\u0301", "é", "ß", "…", "Ω"]
const cell = fc.array(fc.constantFrom(...pieces), { maxLength: 12 }).map((parts) => parts.join(""))
const anyText = fc.oneof(cell, fc.string({ unit: "grapheme", maxLength: 16 }))

const widthsOf = (text: string) => text.split("\n").map(Width.displayWidth)

describe("display width", () => {
  it("measures wide characters as 2 columns and combining marks as 0", () => {
    assert.strictEqual(Width.displayWidth("漢字"), 4)
    assert.strictEqual(Width.displayWidth("👍"), 2)
    assert.strictEqual(Width.displayWidth("e\u0301"), 1)
    assert.strictEqual(Width.displayWidth("\x1b[2mdim\x1b[22m"), 3)
  })

  it("cuts at grapheme boundaries with …, keeping and closing ANSI styles", () => {
    assert.strictEqual(Width.truncate("漢字漢字", 5), "漢字…")
    assert.strictEqual(Width.truncate("漢字漢字", 4), "漢…")
    assert.strictEqual(Width.truncate("漢字漢字", 8), "漢字漢字")
    assert.strictEqual(Width.truncate("e\u0301e\u0301e\u0301", 2), "e\u0301…")
    assert.strictEqual(Width.truncate("👨‍👩‍👧👨‍👩‍👧", 3), "👨‍👩‍👧…")
    assert.strictEqual(Width.truncate("\x1b[1mbold text\x1b[22m", 5), "\x1b[1mbold…\x1b[0m")
    assert.strictEqual(Width.truncate("abc", 0), "")
  })

  it("aligns table columns by display width", () => {
    const rendered = Format.table(["name", "size"], [["漢字モデル", "1"], ["tiny", "22"], ["e\u0301te\u0301", "333"]], [false, true])
    const lines = rendered.split("\n")
    assert.deepStrictEqual(lines, ["name        size", "漢字モデル     1", "tiny          22", "e\u0301te\u0301          333"])
    assert.deepStrictEqual(widthsOf(rendered), [16, 16, 16, 16])
  })

  it("shrinks the widest column first and cuts its cells", () => {
    const rendered = Format.table(
      ["role", "manifest", "n"],
      [["generation", "sha256:0123456789abcdef0123456789abcdef", "1"]],
      [],
      30
    )
    assert.deepStrictEqual(rendered.split("\n"), ["role        manifest         n", "generation  sha256:0123456…  1"])
  })

  it.prop(
    "no table line is wider than the given width",
    [fc.array(fc.array(anyText, { minLength: 3, maxLength: 3 }), { maxLength: 6 }), fc.array(anyText, { minLength: 3, maxLength: 3 }), fc.integer({ min: 1, max: 120 })],
    ([rows, header, maxWidth]) => widthsOf(Format.table(header, rows, [false, true, false], maxWidth)).every((w) => w <= maxWidth)
  )

  it.prop(
    "no progress line is wider than the given width; the bar narrows before anything is cut",
    [cell, fc.nat({ max: 10 ** 9 }), fc.nat({ max: 10 ** 9 }), fc.integer({ min: 1, max: 160 })],
    ([label, bytes, total, maxWidth]) => {
      const line = Format.progressLine({ label, bytes, total, elapsedMillis: 1000 }, 24, maxWidth)
      const full = Format.progressLine({ label, bytes, total, elapsedMillis: 1000 }, 24)
      return Width.displayWidth(line) <= maxWidth && (Width.displayWidth(full) > maxWidth || line === full)
    }
  )

  it.prop("truncate keeps a prefix of whole graphemes and never exceeds the width", [anyText, fc.integer({ min: 0, max: 40 })], ([text, width]) => {
    const cut = Width.truncate(text, width)
    if (Width.displayWidth(text) <= width) return cut === text
    return Width.displayWidth(cut) <= width && (cut === "" || (cut.endsWith("…") && text.startsWith(cut.slice(0, -1))))
  })
})
