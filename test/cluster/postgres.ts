/**
 * The PostgreSQL server of the cluster tests: the URL in NATIVEGEN_TEST_POSTGRES (.ci/run starts
 * one with `.ci/postgres start`). Where it is not set or does not answer, `unavailable` says why
 * and the tests that need it are skipped with that reason in their name. Each test file (or test)
 * works in a database of its own (`freshDatabase`), dropped afterwards, so files running at the
 * same time never meet.
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import type * as Scope from "effect/Scope"
import * as Crypto from "node:crypto"

export const serverUrl = process.env.NATIVEGEN_TEST_POSTGRES

/** The server's SQL client (its own database), for creating and dropping test databases. */
const admin = (url: string) => PgClient.layer({ url: Redacted.make(url), maxConnections: 1, connectTimeout: "5 seconds" })

const probe = (url: string): Promise<string | undefined> =>
  Effect.runPromise(
    Effect.flatMap(SqlClient.SqlClient, (sql) => sql`SELECT 1`).pipe(
      Effect.provide(admin(url)),
      Effect.scoped,
      Effect.timeout("10 seconds"),
      Effect.as(undefined),
      Effect.catchAllCause((cause) => Effect.succeed(`NATIVEGEN_TEST_POSTGRES does not answer (${String(cause).split("\n")[0]})`))
    )
  )

/** Why the PostgreSQL tests cannot run here, or undefined when they can. */
export const unavailable: string | undefined = serverUrl === undefined
  ? "NATIVEGEN_TEST_POSTGRES is not set (.ci/run starts a server: `.ci/postgres start DIR` prints its URL)"
  : await probe(serverUrl)

/** The name of a PostgreSQL test, saying why it is skipped when it is. */
export const named = (name: string) => unavailable === undefined ? name : `${name} [skipped: ${unavailable}]`

/** A database of its own on the test server for the scope (dropped, with its connections, at the end); its URL. */
export const freshDatabase: Effect.Effect<string, never, Scope.Scope> = Effect.gen(function*() {
  const base = serverUrl ?? (yield* Effect.dieMessage(unavailable ?? "no PostgreSQL"))
  const name = `ng_test_${Crypto.randomBytes(6).toString("hex")}`
  const run = (statement: string) =>
    Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe(statement)).pipe(Effect.provide(admin(base)), Effect.scoped, Effect.orDie)
  yield* Effect.acquireRelease(run(`CREATE DATABASE ${name}`), () => run(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`))
  const url = new URL(base)
  url.pathname = `/${name}`
  return url.toString()
})
