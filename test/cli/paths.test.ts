import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Paths from "../../src/cli/Paths.js"

describe("Paths", () => {
  it("puts the socket under XDG_RUNTIME_DIR, else in a per-user temporary directory", () => {
    assert.strictEqual(Paths.defaultSocketPath({ XDG_RUNTIME_DIR: "/run/user/1000" }, 1000, "/tmp"), "/run/user/1000/nativegen/nativegen.sock")
    assert.strictEqual(Paths.defaultSocketPath({}, 1000, "/tmp"), "/tmp/nativegen-1000/nativegen.sock")
    // Relative XDG paths are ignored, as the base directory specification says.
    assert.strictEqual(Paths.defaultSocketPath({ XDG_RUNTIME_DIR: "run" }, 7, "/tmp"), "/tmp/nativegen-7/nativegen.sock")
  })

  it.effect("refuses socket paths over the Unix limit", () =>
    Effect.gen(function*() {
      const exit = yield* Effect.exit(Paths.checkSocketPath(`/tmp/${"x".repeat(120)}.sock`))
      assert.isTrue(Exit.isFailure(exit))
      assert.include(String(exit), "longer than 107 bytes")
    }))

  it.effect("creates the private socket directory 0700 and refuses one others can write", () =>
    Effect.gen(function*() {
      const base = Fs.mkdtempSync(Path.join(Os.tmpdir(), "nativegen-paths-"))
      try {
        const socket = Path.join(base, "run", "nativegen.sock")
        const dir = yield* Paths.ensureSocketDir(socket, { private: true })
        assert.strictEqual(Fs.statSync(dir).mode & 0o777, 0o700)
        Fs.chmodSync(dir, 0o777)
        const exit = yield* Effect.exit(Paths.ensureSocketDir(socket, { private: true }))
        assert.include(String(exit), "writable by others (mode 777)")
        // An explicitly chosen directory is the user's call.
        assert.strictEqual(yield* Paths.ensureSocketDir(socket, { private: false }), dir)
      } finally {
        Fs.rmSync(base, { recursive: true, force: true })
      }
    }))
})
