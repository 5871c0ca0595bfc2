/**
 * The command line's terminal: raw writes to stdout and stderr (streamed text has no line
 * breaks of its own), their styles and widths, and a Console that drops ANSI escapes where colour is off
 * (@effect/cli always styles its help and error text).
 */
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import { type Style, styleFor } from "./Format.js"

export const stdoutStyle = (): Style => styleFor(process.stdout.isTTY === true)
export const stderrStyle = (): Style => styleFor(process.stderr.isTTY === true)

/** The terminal's width in columns; undefined when the stream is not a terminal (output is then never cut). */
export const stdoutColumns = (): number | undefined => (process.stdout.isTTY === true ? process.stdout.columns : undefined)
export const stderrColumns = (): number | undefined => (process.stderr.isTTY === true ? process.stderr.columns : undefined)

export const write = (text: string): Effect.Effect<void> =>
  text === "" ? Effect.void : Effect.sync(() => void process.stdout.write(text))

export const writeError = (text: string): Effect.Effect<void> =>
  text === "" ? Effect.void : Effect.sync(() => void process.stderr.write(text))

const ansi = /\x1b\[[0-9;]*m/g

export const stripAnsi = (text: string): string => text.replace(ansi, "")

const plain = (color: boolean) => (args: ReadonlyArray<unknown>) =>
  color ? args : args.map((arg) => (typeof arg === "string" ? stripAnsi(arg) : arg))

/** Runs `effect` with a Console whose `log` and `error` strip ANSI escapes where colour is off. */
export const withPlainConsole = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.flatMap(Effect.console, (console) => {
    const out = plain(stdoutStyle().color)
    const err = plain(stderrStyle().color)
    const wrapped: Console.Console = {
      ...console,
      log: (...args) => console.log(...out(args)),
      info: (...args) => console.info(...out(args)),
      error: (...args) => console.error(...err(args)),
      warn: (...args) => console.warn(...err(args))
    }
    return Console.withConsole(effect, wrapped)
  })
