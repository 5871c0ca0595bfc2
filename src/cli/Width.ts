/**
 * Display width: how many terminal columns text takes (wide East Asian characters and emoji 2,
 * combining marks and ANSI escapes 0, measured by `string-width`), and cutting text to a width
 * with `…`, grapheme by grapheme, so a cut never splits a character or an escape sequence.
 */
import stringWidth from "string-width"

/** The columns `text` takes on a terminal. */
export const displayWidth = (text: string): number => stringWidth(text)

const graphemes = new Intl.Segmenter(undefined, { granularity: "grapheme" })
const escape = /\x1b\[[0-9;]*[A-Za-z]/y
const ellipsis = "…"

/** `text` padded with spaces to `width` columns (on the right, or on the left when `right`). */
export const pad = (text: string, width: number, right = false): string => {
  const fill = " ".repeat(Math.max(0, width - displayWidth(text)))
  return right ? fill + text : text + fill
}

/**
 * `text` cut to at most `width` columns: unchanged when it fits, else as much as fits before `…`.
 * ANSI escape sequences are kept (they take no column) and, when text was cut after one, the
 * styles are reset after the `…`. A width below 1 gives the empty string.
 */
export const truncate = (text: string, width: number): string => {
  if (displayWidth(text) <= width) return text
  if (width < 1) return ""
  const budget = width - displayWidth(ellipsis)
  let out = ""
  let used = 0
  let styled = false
  let index = 0
  while (index < text.length) {
    escape.lastIndex = index
    const sequence = escape.exec(text)
    if (sequence !== null) {
      out += sequence[0]
      styled = true
      index += sequence[0].length
      continue
    }
    const next = text.indexOf("\x1b", index + 1)
    const plain = text.slice(index, next < 0 ? text.length : next)
    let full = false
    for (const { segment } of graphemes.segment(plain)) {
      const columns = displayWidth(segment)
      if (used + columns > budget) {
        full = true
        break
      }
      out += segment
      used += columns
    }
    if (full) break
    index += plain.length
  }
  return `${out}${ellipsis}${styled ? "\x1b[0m" : ""}`
}

/** Every line of `text` cut to `width` columns; unchanged when `width` is undefined (not a terminal). */
export const fitLines = (text: string, width: number | undefined): string =>
  width === undefined ? text : text.split("\n").map((line) => truncate(line, width)).join("\n")
