/**
 * `dom.js`: building elements without HTML strings (text always goes in as text, never markup),
 * and the number formats every page shares.
 */
import { js } from "./Asset.js"

export const dom = js(
  "dom.js",
  String.raw`
/** An element: h("p", { class: "muted", text: "..." , onclick: fn, "aria-label": "..." }, ...children). */
export function h(tag, props, ...children) {
  const element = document.createElement(tag)
  for (const [key, value] of Object.entries(props ?? {})) {
    if (value === undefined || value === null || value === false) continue
    if (key === "text") element.textContent = String(value)
    else if (key === "class") element.className = value
    else if (key.startsWith("on") && typeof value === "function") element.addEventListener(key.slice(2), value)
    else if (key in element && typeof value !== "string") element[key] = value
    else element.setAttribute(key, value === true ? "" : String(value))
  }
  append(element, children)
  return element
}

/** An SVG element with attributes. */
export function s(tag, attributes, ...children) {
  const element = document.createElementNS("http://www.w3.org/2000/svg", tag)
  for (const [key, value] of Object.entries(attributes ?? {})) {
    if (value !== undefined && value !== null) element.setAttribute(key, String(value))
  }
  append(element, children)
  return element
}

function append(element, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue
    element.append(child instanceof Node ? child : document.createTextNode(String(child)))
  }
}

/** Replaces an element's children. */
export function fill(element, ...children) {
  element.replaceChildren()
  append(element, children)
  return element
}

const units = ["B", "KiB", "MiB", "GiB", "TiB"]

export function bytes(n) {
  if (!Number.isFinite(n)) return "?"
  let value = n
  let unit = 0
  while (Math.abs(value) >= 1024 && unit < units.length - 1) {
    value /= 1024
    unit++
  }
  return (unit === 0 ? String(value) : value.toFixed(value >= 100 ? 0 : 1)) + " " + units[unit]
}

export function millis(n) {
  if (!Number.isFinite(n)) return "?"
  return n >= 10000 ? (n / 1000).toFixed(1) + " s" : Math.round(n) + " ms"
}

export function duration(ms) {
  const seconds = Math.floor(ms / 1000)
  if (seconds < 60) return seconds + " s"
  const minutes = Math.floor(seconds / 60)
  if (minutes < 60) return minutes + " min " + (seconds % 60) + " s"
  return Math.floor(minutes / 60) + " h " + (minutes % 60) + " min"
}

export function rate(n) {
  return Number.isFinite(n) ? n.toFixed(n >= 100 ? 0 : 1) : "?"
}

export function clock(iso) {
  const date = new Date(iso)
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleTimeString()
}

/** A digest shortened for display: sha256:0123456789ab. */
export function short(digest) {
  return typeof digest === "string" ? digest.replace(/^(sha256:)?([0-9a-f]{12})[0-9a-f]+$/, "$1$2") : ""
}

/** A table in a scrolling wrapper: columns are { label, num?, cell(row) }. */
export function table(caption, columns, rows) {
  return h("div", { class: "table-wrap" },
    h("table", {},
      caption === undefined ? null : h("caption", { class: "skip", text: caption }),
      h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col", class: c.num ? "num" : undefined, text: c.label })))),
      h("tbody", {}, rows.map((row) => h("tr", {}, columns.map((c) => h("td", { class: c.num ? "num" : undefined }, c.cell(row))))))))
}
`
)
