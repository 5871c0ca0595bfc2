import { assert, describe, it } from "@effect/vitest"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Paths from "../../src/cli/Paths.js"

const withEnv = <A>(env: Record<string, string | undefined>, f: () => A): A => {
  const saved = Object.fromEntries(Object.keys(env).map((key) => [key, process.env[key]]))
  const set = (values: Record<string, string | undefined>) => {
    for (const [key, value] of Object.entries(values)) {
      if (value === undefined) delete process.env[key]
      else process.env[key] = value
    }
  }
  try {
    set(env)
    return f()
  } finally {
    set(saved)
  }
}

describe("Paths", () => {
  it("puts the socket under XDG_RUNTIME_DIR, else in a per-user temporary directory", () => {
    assert.strictEqual(
      withEnv({ XDG_RUNTIME_DIR: "/run/user/1000" }, Paths.defaultSocketPath),
      "/run/user/1000/nativegen/nativegen.sock"
    )
    const uid = process.getuid?.() ?? Os.userInfo().uid
    assert.strictEqual(
      withEnv({ XDG_RUNTIME_DIR: undefined }, Paths.defaultSocketPath),
      Path.join(Os.tmpdir(), `nativegen-${uid}`, "nativegen.sock")
    )
    // Relative XDG paths are ignored, as the base directory specification says.
    assert.strictEqual(
      withEnv({ XDG_RUNTIME_DIR: "run" }, Paths.defaultSocketPath),
      Path.join(Os.tmpdir(), `nativegen-${uid}`, "nativegen.sock")
    )
  })

  it("keeps the store under XDG_DATA_HOME (the store's own default)", () => {
    assert.strictEqual(
      withEnv({ XDG_DATA_HOME: "/data/home" }, Paths.defaultStoreRoot),
      Path.join("/data/home", "nativegen", "store")
    )
  })
})
