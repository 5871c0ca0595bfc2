/**
 * The socket and its directory: created private, refused when the directory is not private (loose
 * mode, a symlink, another owner), one server per socket (a second one, or a foreign listener, is
 * `AlreadyRunning`), a stale socket of a dead server replaced, the socket removed on close, and
 * closing bounded even when a client stops reading.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Queue from "effect/Queue"
import * as Scope from "effect/Scope"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Net from "node:net"
import * as Path from "node:path"
import * as Client from "../../src/rpc/Client.js"
import * as Server from "../../src/rpc/Server.js"
import { connect as rawConnect, request } from "./support/RawClient.js"
import { connect, serve, tempDir } from "./support/serve.js"
import * as TestProvider from "./support/TestProvider.js"

const modeOf = (path: string) => Fs.lstatSync(path).mode & 0o777

/** A server on `socketPath` in a directory prepared by the test. */
const serveAt = (socketPath: string, options: Partial<Server.ServerOptions> = {}) =>
  Effect.gen(function*() {
    const dir = yield* tempDir
    return yield* serve({ socketPath, ...options }).pipe(Effect.map((served) => ({ ...served, storeDir: dir })))
  })

/** Why a server on `socketPath` did not start (a started one fails the test without dragging its services into the report). */
const startError = (socketPath: string) => Effect.flip(Effect.asVoid(serveAt(socketPath)))

/** Listens on `path` in a child process that then dies by SIGKILL: a stale socket. */
const staleSocket = (path: string) => {
  const result = ChildProcess.spawnSync(process.execPath, [
    "-e",
    `require("net").createServer().listen(${JSON.stringify(path)}, () => process.kill(process.pid, "SIGKILL"))`
  ])
  assert.strictEqual(result.signal, "SIGKILL")
  assert.isTrue(Fs.lstatSync(path).isSocket())
}

describe("socket directory", () => {
  it.scoped("a missing directory is created 0700, the socket is 0600, and closing removes the socket", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const socketPath = Path.join(dir, "a", "b", "nativegen.sock")
      const scope = yield* Scope.make()
      yield* Scope.extend(serveAt(socketPath), scope)
      assert.strictEqual(modeOf(Path.dirname(socketPath)), 0o700)
      assert.isTrue(Fs.lstatSync(socketPath).isSocket())
      assert.strictEqual(modeOf(socketPath), 0o600)
      const { provider } = yield* connect(socketPath)
      assert.strictEqual((yield* provider.count({ text: "a" })).tokens, 1)
      yield* Scope.close(scope, Exit.void)
      assert.isFalse(Fs.existsSync(socketPath))
      // The lock went with it: a new server starts on the same path.
      yield* serveAt(socketPath)
      assert.isTrue(Fs.lstatSync(socketPath).isSocket())
    }))

  it.scoped("an existing directory that others can enter is refused and left as it is", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const socketDir = Path.join(dir, "run")
      Fs.mkdirSync(socketDir)
      Fs.chmodSync(socketDir, 0o755)
      const error = yield* startError(Path.join(socketDir, "nativegen.sock"))
      assert.strictEqual(error._tag, "UnsafeSocketDirectory")
      assert.include(error.message, "0755")
      assert.strictEqual(modeOf(socketDir), 0o755)
      assert.isFalse(Fs.existsSync(Path.join(socketDir, "nativegen.sock")))
      Fs.chmodSync(socketDir, 0o710)
      assert.strictEqual((yield* startError(Path.join(socketDir, "nativegen.sock")))._tag, "UnsafeSocketDirectory")
    }))

  it.scoped("a symlinked directory is refused, even to a private directory", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const real = Path.join(dir, "real")
      Fs.mkdirSync(real, { mode: 0o700 })
      Fs.symlinkSync(real, Path.join(dir, "link"))
      const error = yield* startError(Path.join(dir, "link", "nativegen.sock"))
      assert.strictEqual(error._tag, "UnsafeSocketDirectory")
      assert.include(error.message, "symlink")
      assert.deepStrictEqual(Fs.readdirSync(real), [])
    }))

  it.scoped.skipIf(process.getuid?.() !== 0)("a directory of another owner is refused (needs root to set up)", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const socketDir = Path.join(dir, "theirs")
      Fs.mkdirSync(socketDir, { mode: 0o700 })
      Fs.chownSync(socketDir, 65534, 65534)
      const error = yield* startError(Path.join(socketDir, "nativegen.sock"))
      assert.strictEqual(error._tag, "UnsafeSocketDirectory")
      assert.include(error.message, "owned by uid 65534")
    }))

  it.scoped("something that is not a socket on the path is refused and left alone", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const socketDir = Path.join(dir, "run")
      Fs.mkdirSync(socketDir, { mode: 0o700 })
      const socketPath = Path.join(socketDir, "nativegen.sock")
      Fs.writeFileSync(socketPath, "precious")
      const error = yield* startError(socketPath)
      assert.strictEqual(error._tag, "SocketPathOccupied")
      assert.strictEqual(Fs.readFileSync(socketPath, "utf8"), "precious")
    }))
})

describe("one server per socket", () => {
  it.scoped("a second server on the same socket is AlreadyRunning, and the first keeps serving", () =>
    Effect.gen(function*() {
      const { socketPath } = yield* serve()
      const error = yield* startError(socketPath)
      assert.strictEqual(error._tag, "AlreadyRunning")
      assert.include(error.message, socketPath)
      const { provider } = yield* connect(socketPath)
      assert.strictEqual((yield* provider.count({ text: "ab" })).tokens, 2)
    }))

  it.scoped("a live listener that holds no lock (another program, an older server) is AlreadyRunning and left alone", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const socketDir = Path.join(dir, "run")
      Fs.mkdirSync(socketDir, { mode: 0o700 })
      const socketPath = Path.join(socketDir, "nativegen.sock")
      const accepted = yield* Queue.unbounded<void>()
      const foreign = Net.createServer(() => Queue.unsafeOffer(accepted, undefined))
      yield* Effect.acquireRelease(
        Effect.async<void>((resume) => void foreign.listen(socketPath, () => resume(Effect.void))),
        () => Effect.async<void>((resume) => void foreign.close(() => resume(Effect.void)))
      )
      const error = yield* startError(socketPath)
      assert.strictEqual(error._tag, "AlreadyRunning")
      assert.include(error.message, "accepts connections")
      // The probe's connection reached the foreign listener, and its socket is still there.
      yield* Queue.take(accepted)
      assert.isTrue(Fs.lstatSync(socketPath).isSocket())
    }))

  it.scoped("a stale socket of a dead server: clients get ConnectError, a new server replaces it", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const socketDir = Path.join(dir, "run")
      Fs.mkdirSync(socketDir, { mode: 0o700 })
      const socketPath = Path.join(socketDir, "nativegen.sock")
      staleSocket(socketPath)
      const refused = yield* Effect.flip(Effect.asVoid(connect(socketPath)))
      assert.instanceOf(refused, Client.ConnectError)
      assert.include(refused.reason, "nothing listens")
      yield* serveAt(socketPath)
      const { provider } = yield* connect(socketPath)
      assert.strictEqual((yield* provider.count({ text: "abc" })).tokens, 3)
    }))

  it.scoped("no socket at all: ConnectError says so", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const error = yield* Effect.flip(Effect.asVoid(connect(Path.join(dir, "none.sock"))))
      assert.instanceOf(error, Client.ConnectError)
      assert.include(error.reason, "no socket")
    }))
})

describe("closing", () => {
  it.live("is bounded when a client stops reading: its connection is destroyed after the grace", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const { control, socketPath } = yield* Scope.extend(serve(), scope)
      const raw = yield* rawConnect(socketPath)
      yield* raw.pause
      const big = "x".repeat(256 * 1024)
      const generations: Array<TestProvider.Generation> = []
      // Six chunks of 256 KiB stay under the server's limit of unread responses (2 MiB).
      for (let i = 0; i < 6; i++) {
        yield* raw.send(request(String(i), "Generate", { messages: [], maxTokens: 1 }))
        const generation = yield* Queue.take(control.generations)
        yield* generation.offer(TestProvider.text(big))
        generations.push(generation)
      }
      const started = Date.now()
      yield* Scope.close(scope, Exit.void)
      assert.isBelow(Date.now() - started, 10_000)
      for (const generation of generations) assert.isTrue(Exit.isInterrupted(yield* Deferred.await(generation.ended)))
      // What the server had written is still readable; then the connection is closed.
      yield* raw.resume
      yield* Deferred.await(raw.closed)
      assert.isFalse(Fs.existsSync(socketPath))
    }).pipe(Effect.scoped))
})
