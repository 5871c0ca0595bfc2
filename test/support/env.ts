/** Environment variables set for a test's scope. */
import * as Effect from "effect/Effect"

/** Sets environment variables for the scope, restoring what was there. */
export const withEnv = (vars: Readonly<Record<string, string>>) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const before = Object.fromEntries(Object.keys(vars).map((name) => [name, process.env[name]]))
      Object.assign(process.env, vars)
      return before
    }),
    (before) =>
      Effect.sync(() => {
        for (const [name, value] of Object.entries(before)) {
          if (value === undefined) delete process.env[name]
          else process.env[name] = value
        }
      })
  )
