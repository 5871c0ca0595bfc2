/**
 * What the command line prints, as pure functions: streamed chat chunks (the thought channel
 * dimmed, marked or hidden), the JSON event lines of `--json`, the decision table, the readiness
 * summary, byte sizes, rates and the import progress bar. No I/O here: the commands write the
 * strings, and the tests check them without a terminal.
 */
import * as Schema from "effect/Schema"
import type { Channel, DecideResult, GenerateChunk, Readiness } from "../domain/Inference.js"
import { GenerateChunk as GenerateChunkSchema } from "../domain/Inference.js"
import * as Width from "./Width.js"

// ---------------------------------------------------------------------------------------------
// Style
// ---------------------------------------------------------------------------------------------

/** How text is styled: ANSI escapes on a terminal, plain text otherwise. */
export interface Style {
  readonly color: boolean
}

const sgr = (style: Style, open: string, close: string) => (text: string) =>
  style.color && text !== "" ? `\x1b[${open}m${text}\x1b[${close}m` : text

export const dim = (style: Style) => sgr(style, "2", "22")
export const bold = (style: Style) => sgr(style, "1", "22")
export const red = (style: Style) => sgr(style, "31", "39")
export const green = (style: Style) => sgr(style, "32", "39")
export const yellow = (style: Style) => sgr(style, "33", "39")

/** Colour when the stream is a terminal and neither `NO_COLOR` nor `TERM=dumb` says otherwise. */
export const styleFor = (
  isTty: boolean,
  environment: { readonly NO_COLOR?: string | undefined; readonly TERM?: string | undefined } = process.env
): Style => ({
  color: isTty && (environment.NO_COLOR === undefined || environment.NO_COLOR === "") && environment.TERM !== "dumb"
})

// ---------------------------------------------------------------------------------------------
// Sizes and durations
// ---------------------------------------------------------------------------------------------

const units = ["B", "KiB", "MiB", "GiB", "TiB"] as const

/** `512 B`, `1.5 KiB`, `726.7 KiB`, `3.0 GiB`. */
export const formatBytes = (bytes: number): string => {
  if (!Number.isFinite(bytes) || bytes < 0) return "? B"
  let value = bytes
  let unit = 0
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024
    unit++
  }
  return unit === 0 ? `${bytes} B` : `${value.toFixed(1)} ${units[unit]}`
}

/** `1.2 MiB/s`; `-` when nothing can be said yet. */
export const formatRate = (bytes: number, millis: number): string =>
  millis <= 0 || !Number.isFinite(bytes) ? "-" : `${formatBytes(Math.round((bytes * 1000) / millis))}/s`

/** `840 ms`, `2.4 s`, `3 min 12 s`, `2 h 5 min`. */
export const formatDuration = (millis: number): string => {
  if (!Number.isFinite(millis) || millis < 0) return "-"
  if (millis < 1000) return `${Math.round(millis)} ms`
  if (millis < 60_000) return `${(millis / 1000).toFixed(1)} s`
  const seconds = Math.floor(millis / 1000)
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${seconds % 60} s`
  return `${Math.floor(seconds / 3600)} h ${Math.floor((seconds % 3600) / 60)} min`
}

// ---------------------------------------------------------------------------------------------
// Progress
// ---------------------------------------------------------------------------------------------

export interface ProgressState {
  readonly label: string
  readonly bytes: number
  readonly total: number
  readonly elapsedMillis: number
}

/**
 * One line of an import's progress: `tiny  [########............]  40%  297.6 KiB / 726.7 KiB  1.1 MiB/s`.
 * Without a known total the bar is left out. With `maxWidth` (the terminal's columns), the bar
 * narrows (down to nothing) and then the line is cut with `…` so that it fits.
 */
export const progressLine = (state: ProgressState, width = 24, maxWidth?: number): string => {
  const rate = formatRate(state.bytes, state.elapsedMillis)
  if (state.total <= 0) return fit(`${state.label}  ${formatBytes(state.bytes)}  ${rate}`, maxWidth)
  const fraction = Math.min(1, Math.max(0, state.bytes / state.total))
  const percent = `${Math.floor(fraction * 100)}%`.padStart(4)
  const line = (barWidth: number) => {
    const filled = Math.round(fraction * barWidth)
    const bar = barWidth > 0 ? `[${"#".repeat(filled)}${".".repeat(barWidth - filled)}] ` : ""
    return `${state.label}  ${bar}${percent}  ${formatBytes(state.bytes)} / ${formatBytes(state.total)}  ${rate}`
  }
  const full = line(width)
  if (maxWidth === undefined) return full
  const excess = Width.displayWidth(full) - maxWidth
  if (excess <= 0) return full
  // Below 4 columns a bar says nothing: leave it out.
  const narrowed = width - excess >= 4 ? width - excess : 0
  return fit(line(narrowed), maxWidth)
}

const fit = (line: string, maxWidth: number | undefined) => (maxWidth === undefined ? line : Width.truncate(line, maxWidth))

// ---------------------------------------------------------------------------------------------
// Chat
// ---------------------------------------------------------------------------------------------

/**
 * Generated text made safe for a terminal: C0 and C1 control characters other than line feed and
 * tab (escape sequences among them) become their visible Unicode control pictures (U+2400 + code)
 * or U+FFFD, so a model cannot move the cursor, recolour or retitle the user's terminal.
 */
export const printable = (text: string): string =>
  text.replace(
    /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g,
    (c) => {
      const code = c.charCodeAt(0)
      return code < 0x20 ? String.fromCharCode(0x2400 + code) : code === 0x7f ? "\u2421" : "\ufffd"
    }
  )

/** What happens to the thought channel: dimmed (plain text marked `[thought]` without colour), or hidden. */
export type ThoughtMode = "show" | "hide"

/**
 * The renderer's memory between chunks: the channel of the last text written, and the line
 * breaks that ended it, held back until more text of that channel shows they are inside it.
 */
export interface ChunkRenderState {
  readonly channel: Channel | null
  readonly held: string
}

export const initialChunkRenderState: ChunkRenderState = { channel: null, held: "" }

/**
 * Renders one streamed chunk for a terminal or a pipe. Answer text is written as is (`printable`); thought text
 * is dimmed (or, without colour, opened by `[thought] ` and closed by a line break when the answer
 * starts) unless hidden; tool text is opened by `[tool] `. A tool call is a line of its own,
 * `[tool call] name {"arg":...}` (a malformed one: `[malformed tool call: reason] text`). The Done
 * chunk closes an open channel with a line break and writes nothing else (the summary is `doneSummary`).
 *
 * Line breaks at the edges of a channel are the model's formatting, not content: Qwen3 writes
 * `<think>\n…\n</think>\n\nanswer`. A channel's leading line breaks are dropped, and its trailing
 * ones are held back: written when more text of the channel follows, replaced by the one line
 * break that closes a thought or tool call, and dropped at the end.
 */
export const renderChunk = (
  state: ChunkRenderState,
  chunk: GenerateChunk,
  options: { readonly thoughts: ThoughtMode; readonly style: Style }
): readonly [output: string, state: ChunkRenderState] => {
  if (chunk._tag === "Done") {
    return [state.channel === null ? "" : "\n", initialChunkRenderState]
  }
  if (chunk._tag === "ToolCall" || chunk._tag === "MalformedToolCall") {
    const line = chunk._tag === "ToolCall"
      ? `${bold(options.style)("[tool call]")} ${printable(chunk.name)} ${printable(JSON.stringify(chunk.arguments))}`
      : `[malformed tool call: ${printable(chunk.reason)}] ${printable(chunk.text)}`
    return [`${state.channel === null ? "" : "\n"}${line}\n`, initialChunkRenderState]
  }
  if (chunk.channel === "thought" && options.thoughts === "hide") return ["", state]
  const starts = state.channel !== chunk.channel
  const visible = printable(starts ? chunk.text.replace(/^\n+/, "") : chunk.text)
  if (visible === "") return ["", state]
  const body = visible.replace(/\n+$/, "")
  const held = visible.slice(body.length)
  let out = ""
  if (starts) {
    if (state.channel === "answer") out += state.held
    else if (state.channel !== null) out += "\n"
    if (chunk.channel === "thought" && !options.style.color) out += "[thought] "
    if (chunk.channel === "tool") out += "[tool] "
  } else {
    out += state.held
  }
  if (body === "") return [out, { channel: chunk.channel, held }]
  out += chunk.channel === "thought" ? dim(options.style)(body) : body
  return [out, { channel: chunk.channel, held }]
}

type Done = Extract<GenerateChunk, { readonly _tag: "Done" }>

/**
 * `32 tokens · prompt 57 (51 reused: continuation) · first token 41 ms · 88.1 tok/s · stop: maxTokens`,
 * and `(thought cut short)` after the stop when the limit ended the output inside the thought.
 */
export const doneSummary = (done: Done): string => {
  const { usage, timings } = done
  const reused = usage.reusedTokens > 0 || usage.reuse !== "cold"
    ? ` (${usage.reusedTokens} reused: ${usage.reuse})`
    : " (cold)"
  return [
    `${usage.generatedTokens} tokens`,
    `prompt ${usage.promptTokens}${reused}`,
    `first token ${formatDuration(timings.firstTokenMillis)}`,
    `${timings.decodeTokensPerSecond.toFixed(1)} tok/s`,
    `total ${formatDuration(timings.totalMillis)}`,
    `stop: ${done.stopReason}${done.truncatedChannel === undefined ? "" : ` (${done.truncatedChannel} cut short)`}`
  ].join(" · ")
}

const encodeChunk = Schema.encodeSync(GenerateChunkSchema)

/**
 * One `--json` event line: the chunk in its wire encoding (`{"_tag":"Text",...}`, then
 * `{"_tag":"Done","stopReason",...,"usage":{...,"reuse"},"timings",...,"checkpoint"}`), plus the
 * conversation id when there is one.
 */
export const jsonEvent = (chunk: GenerateChunk, conversation?: string): string =>
  JSON.stringify(conversation === undefined ? encodeChunk(chunk) : { ...encodeChunk(chunk), conversation })

// ---------------------------------------------------------------------------------------------
// Tables
// ---------------------------------------------------------------------------------------------

/**
 * Left-aligned columns (right-aligned where `right[i]`), two spaces apart, no trailing spaces,
 * measured in display columns (wide characters 2, combining marks 0). With `maxWidth`, the widest
 * columns give up columns first, down to `minColumn`, their cells cut with `…`; what is still too
 * wide is cut at the end of the line, so the first (naming) columns stay readable and no line is
 * wider than `maxWidth`.
 */
/** The narrowest a column is made before lines are cut at their end instead. */
const minColumn = 12

export const table = (
  header: ReadonlyArray<string>,
  rows: ReadonlyArray<ReadonlyArray<string>>,
  right: ReadonlyArray<boolean> = [],
  maxWidth?: number
): string => {
  const all = [header, ...rows]
  const widths = header.map((_, i) => Math.max(...all.map((row) => Width.displayWidth(row[i] ?? ""))))
  if (maxWidth !== undefined) {
    let excess = widths.reduce((a, b) => a + b, 0) + 2 * (widths.length - 1) - maxWidth
    while (excess > 0) {
      const widest = widths.reduce((best, w, i) => (w > widths[best]! ? i : best), 0)
      if (widths[widest]! <= minColumn) break
      widths[widest]! -= 1
      excess -= 1
    }
  }
  return all
    .map((row) => {
      const line = widths
        .map((width, i) => Width.pad(Width.truncate(row[i] ?? "", width), width, right[i] === true))
        .join("  ")
        .trimEnd()
      return maxWidth === undefined ? line : Width.truncate(line, maxWidth)
    })
    .join("\n")
}

/** `probability` as a percentage: one decimal from 0.1%, two significant digits below. */
export const formatProbability = (p: number): string =>
  p >= 0.001 || p === 0 ? `${(p * 100).toFixed(1)}%` : `${(p * 100).toPrecision(2)}%`

/** The decision table: one row per label, heads in request order, labels by rank. */
export const decideTable = (result: DecideResult, maxWidth?: number): string =>
  table(
    ["head", "label", "probability", "rank", "log-likelihood"],
    result.heads.flatMap((head) =>
      [...head.labels]
        .sort((a, b) => a.rank - b.rank)
        .map((label) => [
          head.name,
          label.label,
          formatProbability(label.probability),
          String(label.rank),
          label.logLikelihood.toFixed(3)
        ])
    ),
    [false, false, true, true, true],
    maxWidth
  )

export const decideFooter = (result: DecideResult): string =>
  `prompt ${result.promptTokens} tokens · queued ${formatDuration(result.queueMillis)} · total ${formatDuration(result.totalMillis)}`

// ---------------------------------------------------------------------------------------------
// Readiness
// ---------------------------------------------------------------------------------------------

const stateStyle = (style: Style, state: Readiness["state"]) =>
  state === "ready" ? green(style) : state === "failed" || state === "stopped" ? red(style) : yellow(style)

/** A one-line readiness change for the server's log: `ready (engine 1, pid 4242, cpu)`. */
export const readinessLine = (readiness: Readiness): string => {
  const engine = readiness.engine
  const facts = [
    `engine ${engine.incarnation}`,
    ...(engine.pid === null ? [] : [`pid ${engine.pid}`]),
    ...(engine.backend === null ? [] : [engine.backend])
  ].join(", ")
  return `${readiness.state}${readiness.reason === null ? "" : `: ${readiness.reason}`} (${facts})`
}

/**
 * The readable summary of `nativegen status`. `names` maps manifest digests to model names (from
 * the store's listing); without a name, a role's model is shown by its file.
 */
export const readinessSummary = (
  readiness: Readiness,
  style: Style,
  names: ReadonlyMap<string, string> = new Map(),
  maxWidth?: number
): string => {
  const lines: Array<string> = []
  const engine = readiness.engine
  lines.push(
    `${bold(style)("state")}      ${stateStyle(style, readiness.state)(readiness.state)}${
      readiness.reason === null ? "" : ` (${readiness.reason})`
    }`
  )
  lines.push(
    `${bold(style)("engine")}     incarnation ${engine.incarnation}${engine.pid === null ? "" : `, pid ${engine.pid}`}${
      engine.backend === null ? "" : `, ${engine.backend}`
    }${
      engine.build === undefined || engine.build === null || engine.build === "unknown"
        ? ""
        : ` (${engine.build === "localBuild" ? "local build" : engine.build})`
    }${
      engine.threads === undefined ? "" : `, ${engine.threads} threads`
    }${engine.nodeLlamaCppVersion === null ? "" : `, node-llama-cpp ${engine.nodeLlamaCppVersion}`}, up ${
      formatDuration(engine.uptimeMillis)
    }`
  )
  const gpus = (engine.devices ?? []).filter((d) => d.kind === "gpu")
  if (gpus.length > 0 || (engine.driverVersion ?? null) !== null) {
    lines.push(
      `${bold(style)("devices")}    ${
        [
          ...gpus.map((d) => `${d.name} (${formatBytes(d.totalBytes)}, ${formatBytes(d.freeBytes)} free)`),
          ...((engine.driverVersion ?? null) === null ? [] : [`driver ${engine.driverVersion}`])
        ].join(", ")
      }`
    )
  }
  if (readiness.budget !== null) {
    const b = readiness.budget
    lines.push(
      `${bold(style)("budget")}     ${b.device} (${b.kind}, from ${b.source}): ${formatBytes(b.chargedBytes)} charged of ${
        formatBytes(b.budgetBytes)
      }, ${formatBytes(b.freeBytes)} free${b.waiting > 0 ? `, ${b.waiting} waiting` : ""}`
    )
  }
  const s = readiness.scheduler
  lines.push(
    `${bold(style)("scheduler")}  ${s.running} running, ${s.queued} queued, ${s.slots} slots, ${s.conversations} conversations`
  )
  if (readiness.roles.length > 0) {
    lines.push("")
    lines.push(table(
      ["role", "model", "revision", "context", "cap", "limited by", "manifest"],
      readiness.roles.map((role) => [
        role.role,
        (role.manifestDigest === null ? undefined : names.get(role.manifestDigest)) ?? modelName(role.modelPath),
        role.revision === null ? "-" : String(role.revision),
        role.admittedContext === null ? "-" : String(role.admittedContext),
        role.contextCap === null ? "-" : String(role.contextCap),
        role.limitedBy ?? "-",
        role.manifestDigest === null ? "-" : shortDigest(role.manifestDigest)
      ]),
      [false, false, true, true, true, false, false],
      maxWidth
    ))
  }
  if (readiness.recoveryActions.length > 0) {
    lines.push("")
    lines.push("recovery actions:")
    for (const action of readiness.recoveryActions) {
      lines.push(`  ${action.at}  ${action.kind}: ${action.reason} -> ${action.outcome}`)
    }
  }
  return Width.fitLines(lines.join("\n"), maxWidth)
}

/** `sha256:7db657ca956e` from a full digest. */
export const shortDigest = (digest: string): string => {
  const [algorithm, hex] = digest.split(":")
  return hex === undefined ? digest.slice(0, 19) : `${algorithm}:${hex.slice(0, 12)}`
}

/** The last path segment (the store names blobs by digest, so the role's model path is a blob path). */
const modelName = (path: string): string => {
  const base = path.split("/").pop() ?? path
  return /^[0-9a-f]{64}$/.test(base) ? shortDigest(`sha256:${base}`) : base
}
