/**
 * Which runner storage `--cluster-storage` names: a SQLite file (one host) or a PostgreSQL URL
 * (several machines). Plain values only: reading the flag loads none of the cluster's modules.
 */
import * as Data from "effect/Data"
import * as Redacted from "effect/Redacted"
import * as Path from "node:path"

/** The storage a runner uses: a SQLite file (one host) or a PostgreSQL URL (several machines). */
export type StorageSpec =
  | { readonly _tag: "Sqlite"; readonly file: string }
  | { readonly _tag: "Postgres"; readonly url: Redacted.Redacted<string> }

export class InvalidStorage extends Data.TaggedError("InvalidStorage")<{ readonly text: string; readonly reason: string }> {
  override get message() {
    return `cluster storage ${this.text}: ${this.reason}`
  }
}

/** Reads `--cluster-storage`: `postgres://...` / `postgresql://...`, `file:/path`, or a plain file path. */
export const parseStorage = (text: string): StorageSpec | InvalidStorage => {
  if (/^postgres(ql)?:\/\//.test(text)) return { _tag: "Postgres", url: Redacted.make(text) }
  const file = text.startsWith("file:") ? text.slice("file:".length) : text
  if (/^[A-Za-z][A-Za-z0-9+.-]*:\/\//.test(text)) {
    return new InvalidStorage({ text, reason: "give a SQLite file path or a postgres:// URL" })
  }
  if (file === "" || file.endsWith("/")) return new InvalidStorage({ text, reason: "no file name" })
  return { _tag: "Sqlite", file: Path.resolve(file) }
}

/** How the storage is shown in logs (a PostgreSQL URL without its password). */
export const describeStorage = (spec: StorageSpec): string => {
  if (spec._tag === "Sqlite") return `sqlite ${spec.file}`
  const url = new URL(Redacted.value(spec.url))
  if (url.password !== "") url.password = "***"
  return `postgres ${url.toString()}`
}

