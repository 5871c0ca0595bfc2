/**
 * What a person types in the interactive chat, as pure functions: the session's commands
 * (`/set temperature 0.7`, `/set think on|off`, `/set system ...`, `/set max-tokens N`,
 * `/set seed N`, `/show`, `/clear`, `/bye`, `/?`) and multi-line input between `"""` lines (as
 * Ollama reads it). Each returns what to do, or the reason the input is not a command.
 */

/** The settings a session sends with each turn. */
export interface SessionSettings {
  readonly temperature: number
  /** `undefined`: the template decides (Qwen3 thinks); false asks it not to. */
  readonly think: boolean | undefined
  /** The system message; `undefined` for none. */
  readonly system: string | undefined
  readonly maxTokens: number
  readonly seed: number | undefined
}

export type SettingChange =
  | { readonly key: "temperature"; readonly value: number }
  | { readonly key: "think"; readonly value: boolean }
  | { readonly key: "system"; readonly value: string | undefined }
  | { readonly key: "maxTokens"; readonly value: number }
  | { readonly key: "seed"; readonly value: number | undefined }

export type SessionCommand =
  | { readonly _tag: "Message"; readonly text: string }
  | { readonly _tag: "Set"; readonly change: SettingChange }
  | { readonly _tag: "Show" }
  | { readonly _tag: "Clear" }
  | { readonly _tag: "Bye" }
  | { readonly _tag: "Help" }
  | { readonly _tag: "Invalid"; readonly reason: string }

export const help = [
  "/set temperature 0.7   sampling temperature (0 is greedy)",
  "/set think on|off      let the model think before answering, or ask it not to",
  "/set system TEXT       the system message (/set system alone removes it)",
  "/set max-tokens N      most tokens per answer",
  "/set seed N|off        sampling seed",
  "/show                  the settings and the model",
  "/clear                 start a new conversation",
  "/bye                   leave (also Ctrl-D)",
  '"""                    start or end a message of several lines',
  "Ctrl-C                 stop the answer being written; at an empty prompt, twice to leave"
].join("\n")

const invalid = (reason: string): SessionCommand => ({ _tag: "Invalid", reason })

const parseSet = (rest: string): SessionCommand => {
  const key = rest.split(/\s+/, 1)[0] ?? ""
  if (key === "") return invalid("/set what? (temperature, think, system, max-tokens, seed)")
  const raw = rest.slice(key.length)
  const value = raw.trim()
  switch (key) {
    case "temperature": {
      const t = Number(value)
      return value !== "" && Number.isFinite(t) && t >= 0
        ? { _tag: "Set", change: { key: "temperature", value: t } }
        : invalid(`/set temperature ${value}: expected a number >= 0`)
    }
    case "think":
      return value === "on" || value === "off"
        ? { _tag: "Set", change: { key: "think", value: value === "on" } }
        : invalid(`/set think ${value}: expected on or off`)
    case "system":
      return { _tag: "Set", change: { key: "system", value: value === "" ? undefined : value } }
    case "max-tokens": {
      const n = Number(value)
      return Number.isSafeInteger(n) && n >= 1
        ? { _tag: "Set", change: { key: "maxTokens", value: n } }
        : invalid(`/set max-tokens ${value}: expected a whole number >= 1`)
    }
    case "seed": {
      if (value === "off") return { _tag: "Set", change: { key: "seed", value: undefined } }
      const n = Number(value)
      return value !== "" && Number.isSafeInteger(n)
        ? { _tag: "Set", change: { key: "seed", value: n } }
        : invalid(`/set seed ${value}: expected a whole number or off`)
    }
    default:
      return invalid(`/set ${key}: unknown setting (temperature, think, system, max-tokens, seed)`)
  }
}

/** One complete input (a line, or the text of a `"""` block is always a message). */
export const parseLine = (line: string): SessionCommand => {
  const text = line.trim()
  if (!text.startsWith("/")) return { _tag: "Message", text }
  const command = text.split(/\s+/, 1)[0] ?? ""
  const args = text.slice(command.length).trim()
  switch (command) {
    case "/set":
      return parseSet(args)
    case "/show":
      return { _tag: "Show" }
    case "/clear":
      return { _tag: "Clear" }
    case "/bye":
    case "/exit":
      return { _tag: "Bye" }
    case "/?":
    case "/help":
      return { _tag: "Help" }
    default:
      return invalid(`unknown command ${command} (/? lists them)`)
  }
}

export const applyChange = (settings: SessionSettings, change: SettingChange): SessionSettings => ({
  ...settings,
  [change.key]: change.value
})

const fence = '"""'

/** Where a `"""` block stands: the lines read so far, or none open. */
export type Block = ReadonlyArray<string> | undefined

export type Fed =
  | { readonly _tag: "Line"; readonly line: string }
  | { readonly _tag: "Block"; readonly text: string }
  | { readonly _tag: "More"; readonly block: ReadonlyArray<string> }

/**
 * Feeds one typed line: outside a block, a line starting with `"""` opens one (`"""text"""` on one
 * line is a block of its own), any other line is complete; inside, a line ending with `"""`
 * closes the block, whose text is its lines joined with line breaks.
 */
export const feed = (block: Block, line: string): Fed => {
  if (block === undefined) {
    const start = line.trimStart()
    if (!start.startsWith(fence)) return { _tag: "Line", line }
    const rest = start.slice(fence.length)
    const end = rest.trimEnd()
    if (end.endsWith(fence)) return { _tag: "Block", text: end.slice(0, -fence.length) }
    return { _tag: "More", block: rest === "" ? [] : [rest] }
  }
  const end = line.trimEnd()
  if (end.endsWith(fence)) {
    const last = end.slice(0, -fence.length)
    return { _tag: "Block", text: [...block, ...(last === "" ? [] : [last])].join("\n") }
  }
  return { _tag: "More", block: [...block, line] }
}

/** The readable settings of `/show`. */
export const settingsText = (settings: SessionSettings): string =>
  [
    `temperature  ${settings.temperature}`,
    `think        ${settings.think === undefined ? "on (the template's default)" : settings.think ? "on" : "off"}`,
    `system       ${settings.system === undefined ? "-" : JSON.stringify(settings.system)}`,
    `max tokens   ${settings.maxTokens}`,
    `seed         ${settings.seed ?? "-"}`
  ].join("\n")
