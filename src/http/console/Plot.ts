/**
 * `plot.js`: small line charts drawn as inline SVG (no chart library): series over their last
 * values, a zero-based scale rounded up to a readable maximum, optional reference lines, and a
 * caption that says the latest values in words.
 */
import { js } from "./Asset.js"

export const plot = js(
  "plot.js",
  String.raw`
import { h, s } from "./dom.js"

const width = 320
const height = 120
const left = 44
const right = 8
const top = 8
const bottom = 16

/** The smallest of 1, 2, 2.5, 5 times a power of ten at or above n. */
export function niceMax(n) {
  if (!(n > 0)) return 1
  const power = Math.pow(10, Math.floor(Math.log10(n)))
  for (const step of [1, 2, 2.5, 5, 10]) if (step * power >= n) return step * power
  return 10 * power
}

/**
 * A line chart: series [{ label, values }], format(value) for labels, reference lines
 * [{ label, value }], xLabel for the axis.
 */
export function lineChart({ title, series, format, lines = [], xLabel }) {
  const count = Math.max(0, ...series.map((s) => s.values.length))
  const all = [...series.flatMap((s) => s.values), ...lines.map((l) => l.value)].filter(Number.isFinite)
  const max = niceMax(Math.max(0, ...all))
  const x = (i) => left + (count <= 1 ? (width - left - right) / 2 : (i * (width - left - right)) / (count - 1))
  const y = (v) => top + (height - top - bottom) * (1 - v / max)
  const svg = s("svg", { viewBox: "0 0 " + width + " " + height, role: "img", "aria-label": title },
    s("line", { class: "axis", x1: left, y1: y(0), x2: width - right, y2: y(0) }),
    s("line", { class: "axis", x1: left, y1: top, x2: left, y2: y(0) }),
    s("text", { class: "label", x: left - 4, y: top + 8, "text-anchor": "end" }, format(max)),
    s("text", { class: "label", x: left - 4, y: y(0), "text-anchor": "end" }, format(0)),
    xLabel ? s("text", { class: "label", x: width - right, y: height - 2, "text-anchor": "end" }, xLabel) : null,
    lines.map((line, i) =>
      s("g", { class: "series-" + ((i + 1) % 3) },
        s("line", { x1: left, x2: width - right, y1: y(line.value), y2: y(line.value), "stroke-dasharray": "4 3", "stroke-width": 1 }),
        s("text", { class: "label", x: width - right, y: y(line.value) - 2, "text-anchor": "end" }, line.label))),
    series.map((serie, index) =>
      s("g", { class: "series-" + (index % 3) },
        s("polyline", { points: serie.values.map((v, i) => x(i).toFixed(1) + "," + y(v).toFixed(1)).join(" ") }),
        serie.values.map((v, i) => s("circle", { cx: x(i).toFixed(1), cy: y(v).toFixed(1), r: 1.8 }, s("title", {}, serie.label + ": " + format(v)))))))
  const latest = series
    .filter((serie) => serie.values.length > 0)
    .map((serie) => serie.label + " " + format(serie.values[serie.values.length - 1]))
    .join(", ")
  return h("figure", { class: "plot" },
    svg,
    h("figcaption", { text: count === 0 ? title + ": nothing yet" : title + " (latest: " + latest + ")" }))
}
`
)
