/**
 * The HTTP server's configuration: where it listens (a loopback TCP address by default, or a Unix
 * socket path), the optional API key, and the limits that keep a flood or a slow client from
 * hurting the runtime (body size, connections, requests in flight, header and body timeouts).
 * The limits are read from NATIVEGEN_HTTP_*; the address and the key are the caller's (the
 * command line takes them from `--http` and `--api-key`), parsed with `parseListen`.
 */
import * as Config from "effect/Config"
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Either from "effect/Either"
import type * as Redacted from "effect/Redacted"
import * as Net from "node:net"
import { configLayers, fromEnv, setting } from "../internal/ConfigLayers.js"

/** A TCP address (loopback unless the user names another) or a Unix socket path. */
export type Listen =
  | { readonly _tag: "Tcp"; readonly host: string; readonly port: number }
  | { readonly _tag: "Unix"; readonly path: string }

export interface HttpConfigShape {
  readonly listen: Listen
  /** Bearer token every request must carry (compared in constant time); none when undefined. */
  readonly apiKey: Redacted.Redacted<string> | undefined
  /** Largest request body in bytes; more is refused with 413. Default 4 MiB. */
  readonly maxBodyBytes: number
  /** Open connections at once; more are closed by the server. Default 512. */
  readonly maxConnections: number
  /**
   * Requests being handled at once (streams included, until they end); one more is refused with
   * 429 and Retry-After before it reaches the runtime. Default 128.
   */
  readonly maxInFlight: number
  /** Time allowed to receive a request's headers. Default 10 s. */
  readonly headersTimeoutMillis: number
  /** Time allowed to receive a whole request (headers and body); at least the headers' time. Default 30 s. */
  readonly requestTimeoutMillis: number
  /** Retry-After (seconds) on 429 and on 503 while the engine is starting or repairing. Default 1. */
  readonly retryAfterSeconds: number
}

/** The settings read from the environment: every one but the address and the key. */
export type HttpLimits = Omit<HttpConfigShape, "listen" | "apiKey">

/** The port when an address names none; 11434 is Ollama's, 8080 llama-server's. */
export const DEFAULT_PORT = 11435

/** The host when an address names none. */
export const LOOPBACK = "127.0.0.1"

const defaults: HttpConfigShape = {
  listen: { _tag: "Tcp", host: LOOPBACK, port: DEFAULT_PORT },
  apiKey: undefined,
  maxBodyBytes: 4 * 1024 * 1024,
  maxConnections: 512,
  maxInFlight: 128,
  headersTimeoutMillis: 10_000,
  requestTimeoutMillis: 30_000,
  retryAfterSeconds: 1
}

/** An address `parseListen` cannot use; names the text and what is wrong with it. */
export class InvalidListenAddress extends Data.TaggedError("InvalidListenAddress")<{
  readonly text: string
  readonly reason: string
}> {
  override get message() {
    return `invalid HTTP address ${JSON.stringify(this.text)}: ${this.reason}`
  }
}

const portOf = (text: string, port: string): Either.Either<number, InvalidListenAddress> => {
  if (!/^\d{1,5}$/.test(port)) {
    return Either.left(new InvalidListenAddress({ text, reason: `the port ${JSON.stringify(port)} is not a number from 0 to 65535` }))
  }
  const value = Number(port)
  return value > 65535
    ? Either.left(new InvalidListenAddress({ text, reason: `the port ${value} is over 65535` }))
    : Either.right(value)
}

/**
 * Where to listen, from `HOST:PORT`, `[IPv6]:PORT`, `:PORT` or `PORT` (host 127.0.0.1: loopback
 * unless another address is named), or a Unix socket path (any text with a `/`). Port 0 lets the
 * system pick one (the server logs the one it bound).
 */
export const parseListen = (text: string): Either.Either<Listen, InvalidListenAddress> => {
  const fail = (reason: string) => Either.left(new InvalidListenAddress({ text, reason }))
  // A URL has a `/` but is no socket path: `--http http://127.0.0.1:8080` would make directories.
  if (/^[A-Za-z][A-Za-z0-9+.-]*:\/\//.test(text)) return fail("give HOST:PORT (e.g. 127.0.0.1:8080) or a socket path, not a URL")
  if (text.includes("/")) return Either.right({ _tag: "Unix", path: text })
  const tcp = (host: string, port: string) => Either.map(portOf(text, port), (port): Listen => ({ _tag: "Tcp", host, port }))
  const bracketed = /^\[([^\]]*)\]:(.*)$/.exec(text)
  if (bracketed !== null) {
    const host = bracketed[1] ?? ""
    return Net.isIPv6(host) ? tcp(host, bracketed[2] ?? "") : fail(`${JSON.stringify(host)} in brackets is not an IPv6 address`)
  }
  const colon = text.lastIndexOf(":")
  if (colon === -1) return tcp(LOOPBACK, text)
  const host = text.slice(0, colon)
  if (host.includes(":")) return fail("an IPv6 address goes in brackets: [::1]:PORT")
  if (host !== "" && !/^[A-Za-z0-9.-]+$/.test(host)) return fail(`${JSON.stringify(host)} is not a host name or an IPv4 address`)
  return tcp(host === "" ? LOOPBACK : host, text.slice(colon + 1))
}

/** The address as `parseListen` reads it back: `HOST:PORT`, `[IPv6]:PORT`, or the socket path. */
export const formatListen = (listen: Listen): string =>
  listen._tag === "Unix" ? listen.path : Net.isIPv6(listen.host) ? `[${listen.host}]:${listen.port}` : `${listen.host}:${listen.port}`

/** Whether only this machine can reach the address: a Unix socket, `localhost`, 127.0.0.0/8 or ::1. */
export const isLoopback = (listen: Listen): boolean => {
  if (listen._tag === "Unix") return true
  const host = listen.host.toLowerCase()
  if (host === "localhost" || host === "::1") return true
  if (host.startsWith("::ffff:")) return Net.isIPv4(host.slice(7)) && host.slice(7).startsWith("127.")
  return Net.isIPv4(host) && host.startsWith("127.")
}

const atLeast = (minimum: number) => (name: string, fallback: number, description: string) =>
  setting("integer", name, fallback, description).pipe(
    Config.validate({ message: `${name} must be a whole number of at least ${minimum}`, validation: (n) => n >= minimum })
  )

const millis = (name: string, fallback: number, description: string) =>
  setting("duration", name, Duration.millis(fallback), `${description} (a duration: "10 seconds", "500 millis")`).pipe(
    Config.map(Duration.toMillis),
    Config.validate({ message: `${name} must be a positive duration`, validation: (ms) => ms > 0 && Number.isFinite(ms) })
  )

const config: Config.Config<HttpLimits> = Config.all({
  maxBodyBytes: atLeast(1)("NATIVEGEN_HTTP_MAX_BODY_BYTES", defaults.maxBodyBytes, "largest request body, in bytes"),
  maxConnections: atLeast(1)("NATIVEGEN_HTTP_MAX_CONNECTIONS", defaults.maxConnections, "open HTTP connections at once"),
  maxInFlight: atLeast(1)("NATIVEGEN_HTTP_MAX_IN_FLIGHT", defaults.maxInFlight, "HTTP requests handled at once, streams included"),
  headersTimeoutMillis: millis("NATIVEGEN_HTTP_HEADERS_TIMEOUT", defaults.headersTimeoutMillis, "time allowed to receive a request's headers"),
  requestTimeoutMillis: millis("NATIVEGEN_HTTP_REQUEST_TIMEOUT", defaults.requestTimeoutMillis, "time allowed to receive a whole request"),
  retryAfterSeconds: atLeast(0)("NATIVEGEN_HTTP_RETRY_AFTER_SECONDS", defaults.retryAfterSeconds, "Retry-After on 429 and 503, in seconds")
}).pipe(
  Config.validate({
    // Node refuses a header timeout longer than the request's.
    message: "NATIVEGEN_HTTP_HEADERS_TIMEOUT must not be longer than NATIVEGEN_HTTP_REQUEST_TIMEOUT",
    validation: (limits) => limits.headersTimeoutMillis <= limits.requestTimeoutMillis
  })
)

export class HttpConfig extends Context.Tag("nativegen/HttpConfig")<HttpConfig, HttpConfigShape>() {
  static readonly defaults: HttpConfigShape = defaults

  /** Reads NATIVEGEN_HTTP_* (the limits) from the current ConfigProvider. */
  static readonly config: Config.Config<HttpLimits> = config

  private static readonly layers = configLayers(HttpConfig, { defaults: () => defaults, config, env: fromEnv() })

  static readonly layer = HttpConfig.layers.layer
  static readonly layerDefaults = HttpConfig.layers.layerDefaults
  /** The limits from the process environment, whatever ConfigProvider is current. */
  static readonly configFromEnv = HttpConfig.layers.configFromEnv
  /** From the current ConfigProvider, with `options` (the address, the key) on top. */
  static readonly layerConfig = HttpConfig.layers.layerConfig
  /** From the process environment, with `options` (the address, the key) on top. */
  static readonly layerFromEnv = HttpConfig.layers.layerFromEnv
}
