/**
 * `nativegen store list|verify|activate|reap` with no server listening (issue 12, item 8): each
 * works directly on the store under its lock (no socket, or a stale one left by a killed server)
 * and says so on stderr, so a store whose server will not start can be inspected and repaired.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Stream from "effect/Stream"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { ensureModel, pinnedDigests } from "../../fixtures/models.js"
import { Artifact, ggufMediaType, Manifest } from "../../src/domain/Manifest.js"
import * as Store from "../../src/services/Store.js"
import * as Signing from "../../src/services/store/Signing.js"
import * as TrustedKeys from "../../src/cli/TrustedKeys.js"
import { bytesOf, makeKey, makeStore, sha256 } from "../store/helpers.js"
import { type Home, makeHome, run } from "./support.js"

const tinyManifest = (name: string, revision: number) =>
  new Manifest({
    name,
    role: "generation",
    revision,
    artifacts: [new Artifact({ digest: sha256(Fs.readFileSync(ensureModel("tiny"))), size: Fs.statSync(ensureModel("tiny")).size, mediaType: ggufMediaType })]
  })

/**
 * A home whose store holds `mine` (signed by a key trusted with `keys trust`), `other` (signed by
 * a key the command line does not trust) and an unreferenced blob; and `mine` revision 2, signed,
 * on disk.
 */
const prepare = (home: Home) =>
  Effect.gen(function*() {
    const keys = yield* Store.generateKeys(Path.join(home.dir, "keys"))
    const trusted = yield* TrustedKeys.trust(keys.publicKeyPath, Path.join(home.env.XDG_CONFIG_HOME!, "nativegen", "trusted-keys"))
    const privateKey = Either.getOrThrow(Signing.privateKeyFromPem(Fs.readFileSync(keys.privateKeyPath, "utf8")))
    const stranger = makeKey()
    const root = Path.join(home.env.XDG_DATA_HOME!, "nativegen", "store")
    const loose = bytesOf("loose", 1000)
    yield* Effect.scoped(Effect.gen(function*() {
      const store = yield* makeStore(root, [], { trustedKeys: [Fs.readFileSync(keys.publicKeyPath, "utf8"), stranger.publicPem] })
      yield* store.stage(ensureModel("tiny"), pinnedDigests.tiny, Fs.statSync(ensureModel("tiny")).size)
      yield* store.stage(Stream.make(loose), sha256(loose), loose.length)
      yield* store.activate(Signing.sign(tinyManifest("mine", 1), privateKey))
      yield* store.activate(Signing.sign(tinyManifest("other", 1), stranger.privateKey))
    }))
    const revision2 = Path.join(home.dir, "mine-2.manifest.json")
    Fs.writeFileSync(revision2, Signing.envelopeText(Signing.sign(tinyManifest("mine", 2), privateKey)))
    return { root, keyId: trusted.keyId, stranger, revision2, loose: sha256(loose) }
  })

describe("nativegen store without a server (item 8)", () => {
  it.scoped("list, activate, verify and reap work directly on the store and say so", () =>
    Effect.gen(function*() {
      const home = yield* makeHome
      const { loose, revision2, root, stranger } = yield* prepare(home)
      const socket = Path.join(home.env.XDG_RUNTIME_DIR!, "nativegen", "nativegen.sock")
      const direct = `store: no server listens on ${socket}; working directly on ${root}\n`

      const list = yield* run(["store", "list"], { env: home.env })
      assert.strictEqual(list.code, 0, list.stderr)
      assert.strictEqual(list.stderr, direct)
      assert.match(list.stdout, /^generation {2}mine {2}\s+1 {2}cpu /m)
      // The activation signed by a key this command line does not trust is shown as passed over.
      assert.match(list.stdout, new RegExp(`^generation\\s+other\\s+1\\s+cpu\\s+2\\s+manifest signed by unknown key ${stranger.keyId}$`, "m"))

      const activated = yield* run(["store", "activate", revision2], { env: home.env })
      assert.strictEqual(activated.code, 0, activated.stderr)
      assert.strictEqual(activated.stderr, direct)
      assert.match(activated.stdout, /^activated mine revision 2 \(generation\) on cpu: manifest sha256:[0-9a-f]{64}, signed by ed25519:/)

      const verified = yield* run(["store", "verify", pinnedDigests.tiny], { env: home.env })
      assert.strictEqual(verified.stdout, `ok ${pinnedDigests.tiny} (726.7 KiB)\n`)

      const reaped = yield* run(["store", "reap", "--grace-seconds", "0", "--json"], { env: home.env })
      assert.strictEqual(reaped.code, 0, reaped.stderr)
      assert.deepStrictEqual((JSON.parse(reaped.stdout) as { removed: Array<string> }).removed, [loose])
      assert.strictEqual(reaped.stderr, direct)

      // The journal holds what the direct activation appended.
      const journal = Fs.readFileSync(Path.join(root, "journal.jsonl"), "utf8").trim().split("\n")
      assert.strictEqual(journal.length, 3)
      assert.include(journal[2]!, `"model":"mine","revision":2`)
    }), { timeout: 60_000 })

  it.scoped("a stale socket left by a killed server counts as no server", () =>
    Effect.gen(function*() {
      const home = yield* makeHome
      const { root } = yield* prepare(home)
      const socket = Path.join(home.env.XDG_RUNTIME_DIR!, "nativegen", "nativegen.sock")
      Fs.mkdirSync(Path.dirname(socket), { mode: 0o700 })
      // A process that listens and dies without closing: the socket file stays, nobody accepts.
      const child = ChildProcess.spawnSync(process.execPath, [
        "-e",
        `require("net").createServer().listen(${JSON.stringify(socket)}, () => process.kill(process.pid, "SIGKILL"))`
      ])
      assert.strictEqual(child.signal, "SIGKILL")
      assert.isTrue(Fs.statSync(socket).isSocket())
      const list = yield* run(["store", "list", "--json"], { env: home.env })
      assert.strictEqual(list.code, 0, list.stderr)
      assert.strictEqual(list.stderr, `store: no server listens on ${socket}; working directly on ${root}\n`)
      assert.deepStrictEqual((JSON.parse(list.stdout) as { active: Array<{ model: string }> }).active.map((m) => m.model), ["mine"])
    }), { timeout: 60_000 })

  it.scoped("show reads the active models' GGUF headers from the store directly; rm and ls work directly", () =>
    Effect.gen(function*() {
      const home = yield* makeHome
      const { keyId, root } = yield* prepare(home)
      const socket = Path.join(home.env.XDG_RUNTIME_DIR!, "nativegen", "nativegen.sock")
      const direct = `store: no server listens on ${socket}; working directly on ${root}\n`

      const shown = yield* run(["show"], { env: home.env })
      assert.strictEqual(shown.code, 0, shown.stderr)
      assert.strictEqual(shown.stderr, direct)
      const lines = shown.stdout.split("\n")
      assert.deepStrictEqual(lines.slice(0, 10), [
        "mine (generation)",
        "  architecture      llama",
        "  parameters        180.9K",
        "  quantization      F32",
        "  trained context   8192",
        "  license           -",
        lines[6]!,
        `  signed by         ${keyId}`,
        "  loaded            no",
        lines[9]!
      ])
      assert.match(lines[6]!, /^ {2}manifest {10}sha256:[0-9a-f]{64} \(revision 1\)$/)
      // No server: no admitted context, and nothing said about one.
      assert.notInclude(shown.stdout, "admitted context")
      assert.notInclude(shown.stdout, "note")

      const removed = yield* run(["rm", "mine", "--json"], { env: home.env })
      assert.strictEqual(removed.code, 0, removed.stderr)
      const json = JSON.parse(removed.stdout) as { model: string; roles: Array<string>; collectable: Array<string>; loadedByServer: boolean }
      assert.deepStrictEqual([json.model, json.roles, json.collectable, json.loadedByServer], ["mine", ["generation"], [], false])
      const listed = yield* run(["ls"], { env: home.env })
      assert.strictEqual(listed.stderr, direct)
      assert.notMatch(listed.stdout, /^generation {2}mine/m)
      const none = yield* run(["show"], { env: home.env })
      assert.strictEqual(none.code, 1)
      assert.include(none.stderr, "nativegen: no model is active (see `nativegen list`)")
    }), { timeout: 60_000 })

  it.scoped("ps without a server says nothing is loaded and why", () =>
    Effect.gen(function*() {
      const home = yield* makeHome
      const socket = Path.join(home.env.XDG_RUNTIME_DIR!, "nativegen", "nativegen.sock")
      const ps = yield* run(["ps"], { env: home.env })
      assert.strictEqual(ps.code, 1)
      assert.strictEqual(ps.stdout, "")
      assert.strictEqual(
        ps.stderr,
        `nativegen: nothing is loaded: no nativegen server answers on ${socket} (there is no socket (is the server running?))\n`
      )
    }), { timeout: 60_000 })
})
