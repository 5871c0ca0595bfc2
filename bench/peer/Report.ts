/**
 * The peer benchmark's result as a Markdown table (figure | nativegen | peer | ratio | target |
 * met) with its header (machine, load, versions), and as an SVG chart: each figure's ratio on a
 * logarithmic axis against the 1.0 line, its target marked, its bar green when met.
 */
import type { Figure, PeerResult, Target } from "./Result.js"
import type { Summary } from "./Stats.js"

/** A number with about three significant digits (no exponent, thousands separated). */
export const formatNumber = (x: number): string => {
  if (!Number.isFinite(x)) return String(x)
  const abs = Math.abs(x)
  const digits = abs >= 100 ? 0 : abs >= 10 ? 1 : abs >= 1 ? 2 : 3
  return x.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits })
}

/** A summary as `median (min–max)`, or the median alone for one round. */
export const formatSummary = (s: Summary, unit = ""): string => {
  const u = unit === "" ? "" : ` ${unit}`
  return s.rounds.length <= 1 || s.min === s.max
    ? `${formatNumber(s.median)}${u}`
    : `${formatNumber(s.median)}${u} (${formatNumber(s.min)}–${formatNumber(s.max)})`
}

export const formatTarget = (target: Target | undefined, unit: string): string => {
  if (target === undefined) return ""
  const op = target.comparison === "atLeast" ? "≥" : "≤"
  return target.on === "nativegen" ? `nativegen ${op} ${formatNumber(target.value)} ${unit}` : `${op} ${formatNumber(target.value)}`
}

const escapeCell = (text: string) => text.replaceAll("|", "\\|").replaceAll("\n", " ")

export const tableRow = (f: Figure): string =>
  "| " + [
    f.title + (f.threads === undefined ? "" : ` (${f.threads} thread${f.threads === 1 ? "" : "s"})`),
    formatSummary(f.nativegen, f.unit),
    `${formatSummary(f.peer, f.unit)} (${f.peerName})`,
    formatSummary(f.ratio),
    formatTarget(f.target, f.unit),
    f.met === undefined ? "" : f.met ? "yes" : "**no**"
  ].map(escapeCell).join(" | ") + " |"

export const markdown = (result: PeerResult): string => {
  const lines = [
    "# nativegen vs llama-server",
    "",
    `Measured ${result.finishedAt} at git ${result.gitRevision.slice(0, 12)}; ${result.settings.rounds} rounds` +
      `${result.settings.quick ? " (quick)" : ""}, A/B order rotated each round; medians (range).`,
    "",
    `- Machine: ${result.machine.cpu}, ${result.machine.logicalCpus} logical CPUs, ${(result.machine.memoryBytes / 2 ** 30).toFixed(0)} GiB, ${result.machine.os}, Node ${result.machine.node}.`,
    `- Load average before: ${result.load.before}; after: ${result.load.after}.`,
    `- Model: ${result.settings.model} (${result.settings.modelDigest.slice(0, 19)}), context ${result.settings.contextSize}, greedy, threads ${result.settings.threads.join(" and ")}.`,
    `- nativegen ${result.versions.nativegen} (node-llama-cpp ${result.versions.nodeLlamaCpp}); llama-server from the same llama.cpp release ${result.versions.llamaCppRelease}, ` +
      `${result.versions.llamaServer.cpuVariant} variant (GGML_NATIVE=OFF, OpenMP off, as node-llama-cpp's prebuilt binary loads it).`,
    "",
    "| figure | nativegen | peer | ratio | target | met |",
    "|---|---|---|---|---|---|",
    ...result.figures.map(tableRow),
    ""
  ]
  const notes = result.figures.filter((f) => f.note !== undefined)
  if (notes.length > 0) lines.push("Notes:", "", ...notes.map((f) => `- ${f.title}${f.threads === undefined ? "" : ` (${f.threads}t)`}: ${f.note}`), "")
  if (result.skipped.length > 0) lines.push("Not measured:", "", ...result.skipped.map((s) => `- ${s.id}: ${s.reason}`), "")
  return lines.join("\n")
}

const escapeXml = (text: string) => text.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;").replaceAll("\"", "&quot;")

/** The ratio axis: a power-of-ten range (at least 0.1 to 10) holding every ratio and target. */
export const axisRange = (values: ReadonlyArray<number>): { readonly min: number; readonly max: number } => {
  const finite = values.filter((v) => Number.isFinite(v) && v > 0)
  const lo = Math.min(0.1, ...finite)
  const hi = Math.max(10, ...finite)
  return { min: 10 ** Math.floor(Math.log10(lo)), max: 10 ** Math.ceil(Math.log10(hi)) }
}

/** The chart: one row per figure that has a ratio, its median as a bar from 1.0, its range as a line, its target as a tick. */
export const svg = (result: PeerResult): string => {
  const rows = result.figures.filter((f) => Number.isFinite(f.ratio.median) && f.ratio.median > 0)
  const labelWidth = 380
  const plotWidth = 460
  const rowHeight = 22
  const top = 48
  const width = labelWidth + plotWidth + 200
  const height = top + rows.length * rowHeight + 40
  const { min, max } = axisRange(rows.flatMap((f) => [f.ratio.min, f.ratio.max, ...(f.target === undefined || f.target.on === "nativegen" ? [] : [f.target.value])]))
  const x = (v: number) => labelWidth + ((Math.log10(Math.min(max, Math.max(min, v))) - Math.log10(min)) / (Math.log10(max) - Math.log10(min))) * plotWidth
  const out: Array<string> = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="${width}" height="${height}" fill="white"/>`,
    `<text x="10" y="20" font-size="14" font-weight="bold">nativegen ÷ peer (log scale; bar: median from 1.0, line: range, blue tick: target; green: met, red: not met, grey: no target)</text>`,
    `<text x="10" y="36" fill="#555">${escapeXml(`${result.finishedAt.slice(0, 10)}, load ${result.load.before.split(" ").slice(0, 3).join(" ")}, ${result.machine.cpu}, ${result.machine.logicalCpus} CPUs`)}</text>`
  ]
  for (let decade = min; decade <= max * 1.0001; decade *= 10) {
    const gx = x(decade).toFixed(1)
    out.push(`<line x1="${gx}" y1="${top - 4}" x2="${gx}" y2="${top + rows.length * rowHeight}" stroke="${decade === 1 ? "#000" : "#ddd"}" stroke-width="${decade === 1 ? 1.5 : 1}"/>`)
    out.push(`<text x="${gx}" y="${top + rows.length * rowHeight + 16}" text-anchor="middle">${formatNumber(decade)}</text>`)
  }
  rows.forEach((f, i) => {
    const y = top + i * rowHeight
    const label = f.title + (f.threads === undefined ? "" : ` (${f.threads}t)`)
    const one = x(1)
    const m = x(f.ratio.median)
    const colour = f.met === undefined ? "#888" : f.met ? "#2a9d3a" : "#d33"
    out.push(`<text x="${labelWidth - 8}" y="${y + 15}" text-anchor="end">${escapeXml(label)}</text>`)
    out.push(`<rect x="${Math.min(one, m).toFixed(1)}" y="${y + 5}" width="${Math.max(1, Math.abs(m - one)).toFixed(1)}" height="12" fill="${colour}" opacity="0.8"/>`)
    out.push(`<line x1="${x(f.ratio.min).toFixed(1)}" y1="${y + 11}" x2="${x(f.ratio.max).toFixed(1)}" y2="${y + 11}" stroke="#333"/>`)
    if (f.target !== undefined && f.target.on !== "nativegen") {
      const t = x(f.target.value).toFixed(1)
      out.push(`<line x1="${t}" y1="${y + 2}" x2="${t}" y2="${y + 20}" stroke="#1f4fd1" stroke-width="2"/>`)
    }
    out.push(`<text x="${labelWidth + plotWidth + 8}" y="${y + 15}">${escapeXml(formatNumber(f.ratio.median))}</text>`)
  })
  out.push("</svg>")
  return out.join("\n") + "\n"
}
