/**
 * The HTTP server's configuration: where it listens (a loopback TCP address by default, or a Unix
 * socket path), the optional API key, and the limits that keep a flood or a slow client from
 * hurting the runtime (body size, connections, requests in flight, header and body timeouts).
 */
import * as Context from "effect/Context"
import type * as Redacted from "effect/Redacted"

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
  /** Time allowed to receive a whole request (headers and body). Default 30 s. */
  readonly requestTimeoutMillis: number
  /** Retry-After (seconds) on 429 and on 503 while the engine is starting or repairing. Default 1. */
  readonly retryAfterSeconds: number
}

const defaults: HttpConfigShape = {
  listen: { _tag: "Tcp", host: "127.0.0.1", port: 11435 },
  apiKey: undefined,
  maxBodyBytes: 4 * 1024 * 1024,
  maxConnections: 512,
  maxInFlight: 128,
  headersTimeoutMillis: 10_000,
  requestTimeoutMillis: 30_000,
  retryAfterSeconds: 1
}

export class HttpConfig extends Context.Tag("nativegen/HttpConfig")<HttpConfig, HttpConfigShape>() {
  static readonly defaults: HttpConfigShape = defaults
}
