import { assert, describe, it } from "@effect/vitest"
import * as Path from "node:path"
import * as Paths from "../../src/cli/Paths.js"

describe("Paths", () => {
  it("puts the socket under XDG_RUNTIME_DIR, else in a per-user temporary directory", () => {
    assert.strictEqual(
      Paths.defaultSocketPath({ XDG_RUNTIME_DIR: "/run/user/1000" }, 1000, "/tmp"),
      "/run/user/1000/nativegen/nativegen.sock"
    )
    assert.strictEqual(Paths.defaultSocketPath({}, 1000, "/tmp"), "/tmp/nativegen-1000/nativegen.sock")
    // Relative XDG paths are ignored, as the base directory specification says.
    assert.strictEqual(Paths.defaultSocketPath({ XDG_RUNTIME_DIR: "run" }, 7, "/tmp"), "/tmp/nativegen-7/nativegen.sock")
  })

  it("keeps the store under XDG_DATA_HOME (the store's own default)", () => {
    const saved = process.env.XDG_DATA_HOME
    try {
      process.env.XDG_DATA_HOME = "/data/home"
      assert.strictEqual(Paths.defaultStoreRoot(), Path.join("/data/home", "nativegen", "store"))
    } finally {
      if (saved === undefined) delete process.env.XDG_DATA_HOME
      else process.env.XDG_DATA_HOME = saved
    }
  })
})
