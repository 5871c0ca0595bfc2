/**
 * Engine children get only an allowlist of the host's environment plus the configured childEnv:
 * a rule over all inputs (property), and a real child's /proc/<pid>/environ.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as fc from "effect/FastCheck"
import * as Fs from "node:fs"
import { childEnvironment, isInherited } from "../src/native/ChildEnvironment.js"
import { NativeWorker } from "../src/services/NativeWorker.js"
import { testChild, workerLayer } from "./support/engine.js"

const settingsNames = ["NATIVEGEN_BACKEND", "NATIVEGEN_THREADS", "NATIVEGEN_BATCH_SIZE", "NATIVEGEN_BATCH_DECODE", "NATIVEGEN_DECODE_THREADS", "UV_THREADPOOL_SIZE"]

const environOf = (pid: number): Record<string, string> =>
  Object.fromEntries(
    Fs.readFileSync(`/proc/${pid}/environ`, "utf8").split("\0").filter((entry) => entry.length > 0).map((entry) => {
      const at = entry.indexOf("=")
      return [entry.slice(0, at), entry.slice(at + 1)]
    })
  )

describe("engine child environment", () => {
  // Names as environments have them, and names that share the allowlist's prefixes.
  const name = fc.oneof(
    fc.stringMatching(/^[A-Za-z_][A-Za-z0-9_]{0,20}$/),
    fc.constantFrom("PATH", "HOME", "LC_", "VK_", "GGML_", "NODE_", "NODE_LLAMA_CPP_", "CUDA_", "LANG").chain((p) =>
      fc.stringMatching(/^[A-Z0-9_]{0,8}$/).map((rest) => p + rest)
    ),
    fc.constantFrom(...settingsNames, "NATIVEGEN_INCARNATION", "NODE_OPTIONS")
  ).filter((n) => n !== "__proto__")
  const env = fc.dictionary(name, fc.string({ maxLength: 12 }), { maxKeys: 12 })

  it.prop("a host variable reaches the child only when allowlisted or set in childEnv; settings always win", [env, env], ([host, extra]) => {
    const child = childEnvironment(host, testChild, extra, { NATIVEGEN_INCARNATION: "7" })
    for (const [key, value] of Object.entries(child)) {
      if (settingsNames.includes(key) || key === "NATIVEGEN_INCARNATION") continue
      if (key in extra) assert.strictEqual(value, extra[key])
      else assert.isTrue(isInherited(key) && host[key] === value, `${key} leaked into the child`)
    }
    for (const [key, value] of Object.entries(host)) {
      if (isInherited(key) && !(key in extra) && !settingsNames.includes(key) && key !== "NATIVEGEN_INCARNATION") {
        assert.strictEqual(child[key], value, `${key} was not inherited`)
      }
    }
    assert.strictEqual(child.UV_THREADPOOL_SIZE, "1")
    assert.strictEqual(child.NATIVEGEN_THREADS, String(testChild.threads))
    assert.strictEqual(child.NATIVEGEN_INCARNATION, "7")
  })

  it.live.skipIf(!Fs.existsSync("/proc/self/environ"))(
    "a real child does not see a host secret, sees its childEnv, and has what it needs",
    () =>
      Effect.gen(function*() {
        process.env.NATIVEGEN_TEST_SECRET = "host-only-secret"
        process.env.AWS_SECRET_ACCESS_KEY = "host-only-key"
        const environ = yield* Effect.gen(function*() {
          const { pid } = yield* (yield* NativeWorker).readiness
          assert(pid !== undefined)
          return environOf(pid)
        }).pipe(
          Effect.provide(workerLayer({ models: {}, childEnv: { NATIVEGEN_CHILD_ONLY: "for-the-engine", UV_THREADPOOL_SIZE: "4" } })),
          Effect.scoped,
          Effect.ensuring(Effect.sync(() => {
            delete process.env.NATIVEGEN_TEST_SECRET
            delete process.env.AWS_SECRET_ACCESS_KEY
          }))
        )
        assert.notProperty(environ, "NATIVEGEN_TEST_SECRET")
        assert.notProperty(environ, "AWS_SECRET_ACCESS_KEY")
        assert.strictEqual(environ.NATIVEGEN_CHILD_ONLY, "for-the-engine")
        // childEnv cannot override the settings.
        assert.strictEqual(environ.UV_THREADPOOL_SIZE, "1")
        assert.strictEqual(environ.PATH, process.env.PATH)
        assert.strictEqual(environ.NATIVEGEN_INCARNATION, "1")
        // Nothing beyond the allowlist, the childEnv and the settings.
        for (const key of Object.keys(environ)) {
          assert.isTrue(
            isInherited(key) || key.startsWith("NATIVEGEN_") || key === "UV_THREADPOOL_SIZE",
            `unexpected variable ${key} in the child`
          )
        }
        // The host itself never got the child-only variable.
        assert.isUndefined(process.env.NATIVEGEN_CHILD_ONLY)
      }),
    { timeout: 60_000 }
  )
})
