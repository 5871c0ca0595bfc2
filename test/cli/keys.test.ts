import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { ensureModel, pinnedDigests, projectRoot } from "../../fixtures/models.js"
import * as Signing from "../../src/services/store/Signing.js"
import { bin, environment, makeHome, run } from "./support.js"

describe("nativegen keys", () => {
  it.scoped("generate writes a key pair into the default key directory and says how to trust it", () =>
    Effect.gen(function*() {
      const home = yield* makeHome
      const result = yield* run(["keys", "generate"], { env: home.env })
      assert.strictEqual(result.code, 0, result.stderr)
      const keyDir = Path.join(home.env.XDG_DATA_HOME!, "nativegen", "keys")
      const files = Fs.readdirSync(keyDir).sort()
      assert.strictEqual(files.length, 2)
      const [hex] = files[0]!.split(".")
      assert.match(result.stdout, new RegExp(`^key ed25519:${hex}\\n`))
      assert.include(result.stdout, `nativegen keys trust ${Path.join(keyDir, `${hex}.pub`)}`)
      assert.strictEqual(Fs.statSync(Path.join(keyDir, `${hex}.key`)).mode & 0o777, 0o600)
    }))

  it.scoped("sign writes a manifest the store verifies with the public key", () =>
    Effect.gen(function*() {
      const home = yield* makeHome
      const keys = Path.join(home.dir, "keys")
      assert.strictEqual((yield* run(["keys", "generate", "--dir", keys], { env: home.env })).code, 0)
      const key = Path.join(keys, Fs.readdirSync(keys).find((f) => f.endsWith(".key"))!)
      const out = Path.join(home.dir, "my.manifest.json")
      const model = ensureModel("tiny")
      const result = yield* run(
        ["keys", "sign", "--name", "my-tiny", "--revision", "3", "--key", key, "--out", out, model],
        { env: home.env }
      )
      assert.strictEqual(result.code, 0, result.stderr)
      assert.include(result.stdout, `signed my-tiny revision 3 (generation, 726.7 KiB, ${pinnedDigests.tiny})`)
      const trusted = Either.getOrThrow(Signing.publicKeyFromPem(Fs.readFileSync(key.replace(/\.key$/, ".pub"), "utf8")))
      const verified = Either.getOrThrow(
        Signing.readEnvelope(Fs.readFileSync(out), new Map([[trusted.keyId, trusted]]), 65536)
      )
      assert.strictEqual(verified.manifest.name, "my-tiny")
      assert.strictEqual(verified.manifest.revision, 3)
      assert.strictEqual(verified.manifest.artifacts[0]!.digest, pinnedDigests.tiny)
      assert.strictEqual(verified.manifest.artifacts[0]!.size, Fs.statSync(model).size)
    }))

  it.scoped("sign fails with one line for a missing key, a file that is not GGUF and a bad name", () =>
    Effect.gen(function*() {
      const home = yield* makeHome
      const noKey = yield* run(["keys", "sign", "--name", "x", ensureModel("tiny")], { env: home.env })
      assert.strictEqual(noKey.code, 1)
      assert.strictEqual(
        noKey.stderr,
        `nativegen: no private key in ${Path.join(home.env.XDG_DATA_HOME!, "nativegen", "keys")}: run \`nativegen keys generate\` or pass --key\n`
      )
      assert.strictEqual((yield* run(["keys", "generate"], { env: home.env })).code, 0)
      const notGguf = yield* run(["keys", "sign", "--name", "x", "package.json"], { env: home.env })
      assert.strictEqual(notGguf.code, 1)
      assert.match(notGguf.stderr, /^nativegen: package\.json: not a GGUF file \(no GGUF magic\)\n$/)
      const badName = yield* run(["keys", "sign", "--name", "Bad Name", ensureModel("tiny")], { env: home.env })
      assert.strictEqual(badName.code, 1)
      assert.match(badName.stderr, /^nativegen: invalid manifest: .*\n$/)
      assert.strictEqual(badName.stderr.split("\n").length, 2)
    }))

  it.scoped("trust copies a public key into the trusted keys directory; serve refuses a directory others can write", () =>
    Effect.gen(function*() {
      const home = yield* makeHome
      assert.strictEqual((yield* run(["keys", "generate"], { env: home.env })).code, 0)
      const keyDir = Path.join(home.env.XDG_DATA_HOME!, "nativegen", "keys")
      const pub = Path.join(keyDir, Fs.readdirSync(keyDir).find((f) => f.endsWith(".pub"))!)
      const trustedDir = Path.join(home.env.XDG_CONFIG_HOME!, "nativegen", "trusted-keys")
      const trusted = yield* run(["keys", "trust", pub], { env: home.env })
      assert.strictEqual(trusted.code, 0, trusted.stderr)
      assert.match(trusted.stdout, /^trusted ed25519:[0-9a-f]{16}: .*\.pub \(a running server trusts it from its next start\)\n$/)
      assert.deepStrictEqual(Fs.readdirSync(trustedDir), [Path.basename(pub)])
      assert.strictEqual(Fs.statSync(trustedDir).mode & 0o777, 0o700)
      const again = yield* run(["keys", "trust", pub], { env: home.env })
      assert.match(again.stdout, /is already trusted/)
      const notAKey = yield* run(["keys", "trust", "package.json"], { env: home.env })
      assert.strictEqual(notAKey.code, 1)
      assert.match(notAKey.stderr, /^nativegen: package\.json: .*\n$/)
      Fs.chmodSync(trustedDir, 0o777)
      const serve = yield* run(["serve"], { env: home.env })
      assert.strictEqual(serve.code, 1)
      assert.strictEqual(
        serve.stderr,
        `nativegen: ${trustedDir}: the trusted keys directory is writable by others (mode 0777)\n`
      )
    }))

  it.effect("--help documents the commands; an unknown option exits 2", () =>
    Effect.gen(function*() {
      const help = yield* run(["keys", "sign", "--help"])
      assert.strictEqual(help.code, 0)
      assert.include(help.stdout, "--name text")
      assert.include(help.stdout, "Sign a GGUF model")
      assert.notInclude(help.stdout, "\x1b[")
      const bad = yield* run(["keys", "generate", "--nope"])
      assert.strictEqual(bad.code, 2)
    }))
})

describe("the nativegen executable", () => {
  it.effect("bin/nativegen.js is executable and `npx nativegen` runs it in the project directory", () =>
    Effect.gen(function*() {
      assert.strictEqual(Fs.statSync(bin).mode & 0o111, 0o111)
      const result = yield* Effect.async<{ code: number | null; stdout: string }>((resume) => {
        const child = ChildProcess.spawn("npx", ["--no-install", "nativegen", "--version"], {
          cwd: projectRoot,
          env: environment({}),
          stdio: ["ignore", "pipe", "inherit"]
        })
        let stdout = ""
        child.stdout.setEncoding("utf8").on("data", (s: string) => (stdout += s))
        child.on("close", (code) => resume(Effect.succeed({ code, stdout })))
        return Effect.sync(() => void child.kill("SIGKILL"))
      })
      assert.strictEqual(result.code, 0)
      assert.strictEqual(result.stdout.trim(), "0.1.0")
    }))
})
