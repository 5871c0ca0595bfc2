/**
 * The command line as a user runs it: `npm start` (= `nativegen serve`) in its own process group
 * with a private XDG home, then `nativegen status|chat|decide|store|keys` as separate processes
 * against it, checking their real output; last, Ctrl-C (SIGINT to the group) stops the server,
 * its engine child and removes the socket.
 */
import { assert, describe, it, layer } from "@effect/vitest"
import * as CliConfig from "@effect/cli/CliConfig"
import * as Options from "@effect/cli/Options"
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Either from "effect/Either"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Http from "node:http"
import * as Net from "node:net"
import * as Path from "node:path"
import { ensureModel, pinnedDigests, projectRoot } from "../../fixtures/models.js"
import { exposureWarning, options as serveOptions, runtimeOptions } from "../../src/cli/Serve.js"
import { GenerateChunk, Readiness } from "../../src/domain/Inference.js"
import { HttpConfig, parseListen } from "../../src/http/HttpConfig.js"
import { awaitGone, isAlive } from "../support/processes.js"
import { environment, type Home, makeHome, run, runInTerminal, runUntil, terminalUnavailable } from "./support.js"

interface RunningServer {
  readonly home: Home
  readonly socket: string
  readonly publicKey: string
  readonly log: () => string
  /** The `nativegen serve` process and its engine child. */
  readonly servePid: number
  readonly enginePid: number
  /** Ctrl-C: SIGINT to the process group; waits for npm to exit. Idempotent. */
  readonly stop: Effect.Effect<{ readonly code: number | null; readonly signal: NodeJS.Signals | null }>
}

class TestServer extends Context.Tag("test/TestServer")<TestServer, RunningServer>() {}

/** Small contexts and one thread: the machine has two cores and other suites run at once. */
const serverEnv = {
  NATIVEGEN_THREADS: "1",
  NATIVEGEN_ADMISSION_GENERATION_CONTEXT_CAP: "1024",
  NATIVEGEN_ADMISSION_DECISION_CONTEXT_CAP: "512"
}

/** The HTTP API's key, in a file with a trailing newline (the server trims it). */
const httpKey = "sk-cli-test"

/**
 * `npm start` (= `nativegen serve`) with `env` in its own process group, until the scope closes
 * (SIGINT, then SIGKILL to the group); returns once the server logs that the engine is ready.
 */
const spawnServe = (home: Home, env: Record<string, string>, args: ReadonlyArray<string> = []) =>
  Effect.gen(function*() {
    let output = ""
    const exited = yield* Deferred.make<{ code: number | null; signal: NodeJS.Signals | null }>()
    const npm = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const child = ChildProcess.spawn("npm", ["start", ...(args.length === 0 ? [] : ["--", ...args])], {
          cwd: projectRoot,
          env: environment({ ...home.env, ...serverEnv, ...env }),
          stdio: ["ignore", "pipe", "pipe"],
          detached: true
        })
        child.stdout.setEncoding("utf8").on("data", (s: string) => (output += s))
        child.stderr.setEncoding("utf8").on("data", (s: string) => (output += s))
        child.on("close", (code, signal) => Deferred.unsafeDone(exited, Effect.succeed({ code, signal })))
        return child
      }),
      // Whatever the tests did, nothing outlives the suite: SIGINT, then SIGKILL to the group.
      (child) =>
        Effect.gen(function*() {
          const group = -child.pid!
          yield* Effect.sync(() => {
            try {
              process.kill(group, "SIGINT")
            } catch {}
          })
          yield* Deferred.await(exited).pipe(
            Effect.timeoutOption("20 seconds"),
            Effect.zipRight(Effect.sync(() => {
              try {
                process.kill(group, "SIGKILL")
              } catch {}
            }))
          )
        })
    )
    // Readiness by the server's own log line: no fixed sleeps.
    const ready = /ready \(engine 1, pid (\d+), cpu\)/
    const match = yield* Effect.suspend(() => {
      const m = ready.exec(output)
      if (m !== null) return Effect.succeed(m)
      return Deferred.isDone(exited).pipe(
        Effect.flatMap((done) => done ? Effect.die(new Error(`the server exited:\n${output}`)) : Effect.fail("not yet"))
      )
    }).pipe(Effect.retry(Schedule.spaced("100 millis").pipe(Schedule.upTo("90 seconds"))), Effect.orDie)
    const stop = yield* Effect.cached(
      Effect.sync(() => process.kill(-npm.pid!, "SIGINT")).pipe(Effect.zipRight(Deferred.await(exited)))
    )
    return {
      log: () => output,
      servePid: Number(/starting \(pid (\d+)\)/.exec(output)![1]),
      enginePid: Number(match[1]),
      stop
    }
  })

const startServer = Effect.gen(function*() {
  const home = yield* makeHome
  // Your own signing key, trusted before the server starts (for the store import below).
  const keys = yield* run(["keys", "generate"], { env: home.env })
  assert.strictEqual(keys.code, 0, keys.stderr)
  const keyDir = Path.join(home.env.XDG_DATA_HOME!, "nativegen", "keys")
  const publicKey = Path.join(keyDir, Fs.readdirSync(keyDir).find((f) => f.endsWith(".pub"))!)
  const trusted = yield* run(["keys", "trust", publicKey], { env: home.env })
  assert.strictEqual(trusted.code, 0, trusted.stderr)
  const keyFile = Path.join(home.dir, "api-key")
  Fs.writeFileSync(keyFile, `${httpKey}\n`, { mode: 0o600 })
  // HTTP on a port the system picks (read back from the log), with the key from its file.
  const server = yield* spawnServe(home, { NATIVEGEN_HTTP: "127.0.0.1:0", NATIVEGEN_API_KEY_FILE: keyFile })
  return {
    home,
    socket: Path.join(home.env.XDG_RUNTIME_DIR!, "nativegen", "nativegen.sock"),
    publicKey,
    ...server
  } satisfies RunningServer
})

const decodeChunk = Schema.decodeUnknownSync(Schema.extend(GenerateChunk, Schema.Struct({ conversation: Schema.String })))
const decodeReadiness = Schema.decodeUnknownSync(Readiness)

const lines = (text: string) => text.split("\n").filter((line) => line !== "")

/** The seed generation model's scripted reply (fixtures/qwen3-models.ts), as the chat command shows it. */
const thought = "The user greets me; a short, friendly reply fits."
const answer = "Hello! I am the nativegen seed model."

layer(Layer.scoped(TestServer, startServer), { timeout: "120 seconds", excludeTestServices: true })("nativegen serve (npm start)", (it) => {
  it.effect("imports and activates the seed, loads both roles and logs readiness", () =>
    Effect.gen(function*() {
      const server = yield* TestServer
      const log = server.log()
      assert.include(log, `listening on ${server.socket}`)
      assert.include(log, "1 trusted keys besides the seed's")
      assert.match(log, /store: activated[\s\S]*model: (qwen-chat|qwen-decision)/)
      assert.isTrue(Fs.statSync(server.socket).isSocket())
      assert.isTrue(isAlive(server.enginePid))
    }))

  it.effect("status shows readiness as a summary and as JSON", () =>
    Effect.gen(function*() {
      const { home } = yield* TestServer
      const text = yield* run(["status"], { env: home.env })
      assert.strictEqual(text.code, 0, text.stderr)
      assert.match(text.stdout, /^state {6}ready$/m)
      assert.match(text.stdout, /^generation {2}qwen-chat\s+1\s+1024\s+1024\s+cap\s+sha256:[0-9a-f]{12}$/m)
      assert.match(text.stdout, /^decision {4}qwen-decision\s+1\s+512\s+512\s+cap\s+sha256:[0-9a-f]{12}$/m)
      const json = yield* run(["status", "--json"], { env: home.env })
      assert.strictEqual(json.code, 0, json.stderr)
      const readiness = decodeReadiness(JSON.parse(json.stdout))
      assert.strictEqual(readiness.state, "ready")
      assert.deepStrictEqual(readiness.roles.map((r) => [r.role, r.admittedContext]), [["generation", 1024], ["decision", 512]])
    }))

  it.effect("status --watch prints the current readiness, then changes, until Ctrl-C", () =>
    Effect.gen(function*() {
      const { home } = yield* TestServer
      const watched = yield* runUntil(["status", "--watch", "--json"], (out) => out.includes("\n"), { env: home.env })
      assert.strictEqual(watched.code, 0, watched.stderr)
      assert.strictEqual(decodeReadiness(JSON.parse(lines(watched.stdout)[0]!)).state, "ready")
    }))

  it.effect("chat prints the seed's scripted answer after its thought; --hide-thoughts leaves the thought out", () =>
    Effect.gen(function*() {
      const { home } = yield* TestServer
      // As a user runs it: the default temperature (0.7); the script's logit margin keeps sampling on it.
      const text = yield* run(["chat", "hi"], { env: home.env })
      assert.strictEqual(text.code, 0, text.stderr)
      assert.strictEqual(text.stdout, `[thought] ${thought}\n${answer}\n`)
      // Cold, or reusing what the start-up warm-up left in the slot (a repeated prompt keeps its prefill).
      assert.match(text.stderr, /^26 tokens · prompt 9 \((?:cold|\d+ reused: [a-z]+)\) · first token \d+ ms · [\d.]+ tok\/s · total .* · stop: endOfGeneration\n$/)
      const hidden = yield* run(["chat", "--hide-thoughts", "hi"], { env: home.env })
      assert.strictEqual(hidden.code, 0, hidden.stderr)
      assert.strictEqual(hidden.stdout, `${answer}\n`)
    }))

  it.effect.skipIf(terminalUnavailable !== undefined)("on a terminal the thought is dimmed, or hidden with --hide-thoughts", () =>
    Effect.gen(function*() {
      const { home } = yield* TestServer
      const shown = yield* runInTerminal(["chat", "hi"], { env: home.env })
      assert.strictEqual(shown.code, 0, shown.stdout)
      // Each thought piece between SGR 2 (dim) and 22 (normal intensity), then the answer plain.
      const dimmed = /((?:\x1b\[2m[^\x1b]*\x1b\[22m)+)\n(.*)\n/.exec(shown.stdout)
      assert.isNotNull(dimmed, JSON.stringify(shown.stdout))
      assert.strictEqual(dimmed![1]!.replaceAll("\x1b[2m", "").replaceAll("\x1b[22m", ""), thought)
      assert.strictEqual(dimmed![2], answer)
      assert.notInclude(shown.stdout, "[thought]")
      const hidden = yield* runInTerminal(["chat", "--hide-thoughts", "hi"], { env: home.env })
      assert.strictEqual(hidden.code, 0, hidden.stdout)
      assert.include(hidden.stdout, `${answer}\n`)
      assert.notInclude(hidden.stdout, "The user greets me")
    }))

  it.effect("--json prints chunk events per channel then Done; a limit inside the thought ends it cut short", () =>
    Effect.gen(function*() {
      const { home } = yield* TestServer
      const json = yield* run(["chat", "-t", "0", "--json", "Hello there"], { env: home.env })
      assert.strictEqual(json.code, 0, json.stderr)
      const events = lines(json.stdout).map((line) => decodeChunk(JSON.parse(line)))
      const done = events.at(-1)!
      assert.strictEqual(done._tag, "Done")
      if (done._tag !== "Done") return
      const textIn = (channel: string) => events.map((e) => (e._tag === "Text" && e.channel === channel ? e.text : "")).join("")
      assert.strictEqual(textIn("thought"), `${thought}\n`)
      assert.strictEqual(textIn("answer"), `\n\n${answer}`)
      assert.strictEqual(done.stopReason, "endOfGeneration")
      // 26 generated tokens: the Text chunks carry all but the two markers.
      assert.strictEqual(done.usage.generatedTokens, 26)
      assert.strictEqual(events.reduce((n, e) => n + (e._tag === "Text" ? e.tokens.length : 0), 0), 24)
      assert.isAbove(done.timings.totalMillis, 0)
      const cut = yield* run(["chat", "-t", "0", "-n", "8", "Hello there"], { env: home.env })
      assert.strictEqual(cut.code, 0, cut.stderr)
      assert.strictEqual(cut.stdout, "[thought] The user greets me; a\n")
      assert.match(cut.stderr, /^8 tokens · .* · stop: maxTokens \(thought cut short\)\n$/)
    }))

  it.effect("interactive chat keeps the conversation: each turn resends the history and reuses the cache", () =>
    Effect.gen(function*() {
      const { home } = yield* TestServer
      const result = yield* run(["chat", "-t", "0", "--json"], {
        env: home.env,
        stdin: "Hello there\nTell me more\n"
      })
      assert.strictEqual(result.code, 0, result.stderr)
      const dones = lines(result.stdout).map((line) => decodeChunk(JSON.parse(line))).filter((e) => e._tag === "Done")
      assert.strictEqual(dones.length, 2)
      const [first, second] = dones as [typeof dones[number] & { _tag: "Done" }, typeof dones[number] & { _tag: "Done" }]
      assert.strictEqual(first.conversation, second.conversation)
      // The second prompt holds the first turn (user, answer) and the new user turn.
      assert.isAbove(second.usage.promptTokens, first.usage.promptTokens + first.usage.generatedTokens)
      // The first turn's checkpoint went back with the second turn: everything it held was reused.
      assert.isDefined(first.checkpoint)
      assert.strictEqual(first.checkpoint!.conversation, first.conversation)
      assert.strictEqual(second.usage.reuse, "continuation")
      assert.strictEqual(second.usage.reusedTokens, first.usage.promptTokens + first.usage.generatedTokens)
    }))

  it.effect("decide prints labels, probabilities and ranks per head; --json the result", () =>
    Effect.gen(function*() {
      const { home } = yield* TestServer
      const args = ["decide", "--prompt", "I love this product", "--head", "sentiment=positive,negative,neutral", "--head", "topic=shopping,weather"]
      const text = yield* run(args, { env: home.env })
      assert.strictEqual(text.code, 0, text.stderr)
      const rows = lines(text.stdout)
      assert.strictEqual(rows[0], "head       label     probability  rank  log-likelihood")
      assert.strictEqual(rows.length, 6)
      assert.deepStrictEqual(rows.slice(1).map((r) => r.split(/\s+/)[0]), ["sentiment", "sentiment", "sentiment", "topic", "topic"])
      assert.deepStrictEqual(rows.slice(1).map((r) => r.split(/\s+/)[3]), ["1", "2", "3", "1", "2"])
      assert.match(text.stderr, /^prompt \d+ tokens · queued .* · total .*\n$/)
      const json = yield* run([...args, "--json"], { env: home.env })
      const result = JSON.parse(json.stdout) as { heads: Array<{ name: string; labels: Array<{ probability: number }> }> }
      for (const head of result.heads) {
        assert.closeTo(head.labels.reduce((sum, l) => sum + l.probability, 0), 1, 1e-6)
      }
      const bad = yield* run(["decide", "--prompt", "x", "--head", "sentiment"], { env: home.env })
      assert.strictEqual(bad.code, 2)
      assert.include(bad.stderr, `--head "sentiment": expected NAME=LABEL,LABEL,...`)
    }))

  it.effect("store: import a model signed with your own key (progress with bytes and rate), list, verify, activate, reap", () =>
    Effect.gen(function*() {
      const { home } = yield* TestServer
      const model = ensureModel("small")
      const manifest = Path.join(home.dir, "my-small.manifest.json")
      const signed = yield* run(["keys", "sign", "--name", "my-small", "--out", manifest, model], { env: home.env })
      assert.strictEqual(signed.code, 0, signed.stderr)
      const imported = yield* run(["store", "import", "--manifest", manifest, model], { env: home.env })
      assert.strictEqual(imported.code, 0, imported.stderr)
      assert.match(imported.stderr, /^verified my-small revision 1 \(generation\)$/m)
      assert.match(imported.stderr, /^my-small {2}\[#{24}\] 100% {2}5\.3 MiB \/ 5\.3 MiB {2}[\d.]+ (KiB|MiB|GiB)\/s$/m)
      assert.include(imported.stderr, `staged ${pinnedDigests.small}`)
      assert.match(imported.stdout, /^activated my-small revision 1 \(generation\) on cpu: manifest sha256:[0-9a-f]{64}, signed by ed25519:/)
      const list = yield* run(["store", "list"], { env: home.env })
      assert.strictEqual(list.stderr, `store: through the server on ${Path.join(home.env.XDG_RUNTIME_DIR!, "nativegen", "nativegen.sock")}\n`)
      assert.match(list.stdout, /^generation {2}my-small\s+1\s+cpu\s/m)
      assert.include(list.stdout, pinnedDigests.small)
      const listJson = JSON.parse((yield* run(["store", "list", "--json"], { env: home.env })).stdout) as {
        active: Array<{ model: string }>
      }
      assert.deepStrictEqual(listJson.active.map((a) => a.model).sort(), ["my-small", "qwen-chat", "qwen-decision"])
      const verified = yield* run(["store", "verify", pinnedDigests.small], { env: home.env })
      assert.strictEqual(verified.stdout, `ok ${pinnedDigests.small} (5.3 MiB)\n`)
      const again = yield* run(["store", "activate", manifest], { env: home.env })
      assert.match(again.stdout, /^my-small revision 1 \(generation\) on cpu was already active/)
      const reaped = yield* run(["store", "reap", "--grace-seconds", "0"], { env: home.env })
      assert.strictEqual(reaped.code, 0, reaped.stderr)
      assert.match(reaped.stdout, /^removed 0 blobs \(0 B\), kept 0/)
      const bad = yield* run(["store", "verify", "sha256:00"], { env: home.env })
      assert.strictEqual(bad.code, 1)
      assert.match(bad.stderr, /^store: through the server on \S+\nnativegen: invalid digest "sha256:00": expected 64 hex digits, got 2 characters\n$/)
    }))

  it.effect("a second server on the same socket is refused at once, with one line", () =>
    Effect.gen(function*() {
      const { home } = yield* TestServer
      const second = yield* run(["serve"], { env: { ...home.env, ...serverEnv } })
      assert.strictEqual(second.code, 1)
      assert.match(second.stderr, /^nativegen: a nativegen server is already running on .*nativegen\.sock \(.*\)\n$/m)
      assert.notInclude(second.stdout + second.stderr, "store: activated")
    }))

  it.effect("--http: logs the bound address; /health answers without a key, the APIs only with the key from its file", () =>
    Effect.gen(function*() {
      const server = yield* TestServer
      const listening = /http: listening on (http:\/\/127\.0\.0\.1:\d+) \(API key required\)/.exec(server.log())
      assert.isNotNull(listening, server.log())
      const base = listening![1]!
      const health = yield* Effect.promise(() => fetch(`${base}/health`))
      assert.strictEqual(health.status, 200)
      assert.deepStrictEqual(yield* Effect.promise(() => health.json()), { status: "ok" })
      const refused = yield* Effect.promise(() => fetch(`${base}/v1/models`))
      assert.strictEqual(refused.status, 401)
      assert.strictEqual(refused.headers.get("www-authenticate"), "Bearer")
      assert.deepStrictEqual(yield* Effect.promise(() => refused.json()), {
        error: {
          message: "this server needs an API key: send it as `Authorization: Bearer <key>`",
          type: "authentication_error",
          param: null,
          code: "invalid_api_key"
        }
      })
      const wrong = yield* Effect.promise(() => fetch(`${base}/api/tags`, { headers: { "x-api-key": `${httpKey}x` } }))
      assert.strictEqual(wrong.status, 401)
      assert.deepStrictEqual(yield* Effect.promise(() => wrong.json()), { error: "the API key is not valid" })
      // The key as the file holds it, trimmed.
      const accepted = yield* Effect.promise(() => fetch(`${base}/v1/models`, { headers: { authorization: `Bearer ${httpKey}` } }))
      assert.notStrictEqual(accepted.status, 401)
      assert.notInclude(server.log(), httpKey)
    }))

  it.effect("--http: the web console loads without the key; its /nativegen/models sees the store serve runs on", () =>
    Effect.gen(function*() {
      const server = yield* TestServer
      const base = /http: listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(server.log())![1]!
      const page = yield* Effect.promise(() => fetch(`${base}/`))
      assert.strictEqual(page.status, 200)
      assert.match(page.headers.get("content-type") ?? "", /^text\/html/)
      const models = yield* Effect.promise(() =>
        fetch(`${base}/nativegen/models`, { headers: { authorization: `Bearer ${httpKey}` } })
          .then((r) => r.json() as Promise<{ readonly active: ReadonlyArray<{ readonly model: string }> }>)
      )
      assert.includeMembers(models.active.map((m) => m.model), ["qwen-chat", "qwen-decision"])
    }))

  it.effect("serve refuses a bad --http address, a key given twice and an empty key file, before starting anything", () =>
    Effect.gen(function*() {
      const { home } = yield* TestServer
      const elsewhere = ["serve", "--socket", Path.join(home.dir, "other.sock")]
      const env = { ...home.env, ...serverEnv }
      const badPort = yield* run([...elsewhere, "--http", "127.0.0.1:70000"], { env })
      assert.strictEqual(badPort.code, 1)
      assert.include(badPort.stderr, `nativegen: invalid HTTP address "127.0.0.1:70000": the port 70000 is over 65535\n`)
      const keyFile = Path.join(home.dir, "api-key")
      const twice = yield* run([...elsewhere, "--http", "0", "--api-key", "k", "--api-key-file", keyFile], { env })
      assert.strictEqual(twice.code, 1)
      assert.include(
        twice.stderr,
        "nativegen: give the API key once: --api-key (NATIVEGEN_API_KEY) or --api-key-file (NATIVEGEN_API_KEY_FILE)\n"
      )
      const emptyFile = Path.join(home.dir, "empty-key")
      Fs.writeFileSync(emptyFile, " \n")
      const empty = yield* run([...elsewhere, "--http", "0", "--api-key-file", emptyFile], { env })
      assert.strictEqual(empty.code, 1)
      assert.include(empty.stderr, `nativegen: ${emptyFile}: the API key file is empty\n`)
      for (const result of [badPort, twice, empty]) assert.notInclude(result.stdout + result.stderr, "store: activated")
    }))

  it.effect("Ctrl-C stops the server: the engine child is gone and the socket removed", () =>
    Effect.gen(function*() {
      const server = yield* TestServer
      yield* server.stop
      yield* awaitGone(server.servePid, "20 seconds")
      yield* awaitGone(server.enginePid, "10 seconds")
      assert.include(server.log(), "stopping: engine and socket")
      assert.include(server.log(), "stopped")
      assert.isFalse(Fs.existsSync(server.socket))
      // The HTTP port is closed with it.
      const port = Number(/http: listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(server.log())![1])
      const connecting = yield* Effect.async<string>((resume) => {
        const socket = Net.createConnection({ host: "127.0.0.1", port })
        socket.on("connect", () => resume(Effect.succeed("connected")))
        socket.on("error", (error: NodeJS.ErrnoException) => resume(Effect.succeed(error.code ?? "error")))
        return Effect.sync(() => socket.destroy())
      })
      assert.strictEqual(connecting, "ECONNREFUSED")
    }))

  it.scoped("restarted with --http on a socket path: GET /health over the Unix socket; the socket is removed on Ctrl-C", () =>
    Effect.gen(function*() {
      const { home } = yield* TestServer
      const socketPath = Path.join(home.env.XDG_RUNTIME_DIR!, "nativegen", "http.sock")
      const server = yield* spawnServe(home, {}, ["--http", socketPath])
      assert.include(server.log(), `http: listening on unix:${socketPath} (no API key)`)
      assert.notInclude(server.log(), "can be reached from other machines")
      assert.strictEqual(Fs.statSync(socketPath).mode & 0o777, 0o600)
      const health = yield* Effect.async<{ readonly status: number; readonly body: string }>((resume) => {
        const request = Http.get({ socketPath, path: "/health" }, (response) => {
          let body = ""
          response.setEncoding("utf8").on("data", (chunk: string) => (body += chunk))
          response.on("end", () => resume(Effect.succeed({ status: response.statusCode!, body })))
        })
        request.on("error", (cause) => resume(Effect.die(cause)))
        return Effect.sync(() => request.destroy())
      })
      assert.deepStrictEqual(health, { status: 200, body: `{"status":"ok"}` })
      yield* server.stop
      yield* awaitGone(server.enginePid, "10 seconds")
      assert.isFalse(Fs.existsSync(socketPath))
    }), { timeout: 120_000 })
})

describe("nativegen without a server", () => {
  it.scoped("client commands fail with one line naming the socket (the store's work directly: test/cli/store.test.ts)", () =>
    Effect.gen(function*() {
      const home = yield* makeHome
      const socket = Path.join(home.env.XDG_RUNTIME_DIR!, "nativegen", "nativegen.sock")
      for (const args of [["status"], ["chat", "hi"], ["decide", "-p", "x", "--head", "a=b,c"], ["store", "import", "-m", "package.json", "package.json"]]) {
        const result = yield* run(args, { env: home.env })
        assert.strictEqual(result.code, 1, args.join(" "))
        assert.strictEqual(
          result.stderr,
          `nativegen: cannot connect to a nativegen server on ${socket}: there is no socket (is the server running?)\n`
        )
        assert.strictEqual(result.stdout, "")
      }
      const elsewhere = yield* run(["status", "--socket", Path.join(home.dir, "other.sock")], { env: home.env })
      assert.include(elsewhere.stderr, Path.join(home.dir, "other.sock"))
      const fromEnv = yield* run(["status"], { env: { ...home.env, NATIVEGEN_SOCKET: Path.join(home.dir, "env.sock") } })
      assert.include(fromEnv.stderr, Path.join(home.dir, "env.sock"))
    }), { timeout: 60_000 })
})

describe("serve's HTTP settings", () => {
  it("a warning when other machines can reach the HTTP address and no key guards it", () => {
    const config = (text: string, apiKey?: string) => ({
      ...HttpConfig.defaults,
      listen: Either.getOrThrow(parseListen(text)),
      apiKey: apiKey === undefined ? undefined : Redacted.make(apiKey)
    })
    assert.strictEqual(
      exposureWarning(config("0.0.0.0:8080")),
      "http: 0.0.0.0:8080 can be reached from other machines and no API key is set: anyone who reaches it can use the models " +
        "(--api-key-file sets one)"
    )
    assert.include(exposureWarning(config("[::]:8080")), "http: [::]:8080 can be reached from other machines")
    assert.isUndefined(exposureWarning(config("0.0.0.0:8080", "k")))
    assert.isUndefined(exposureWarning(config("127.0.0.1:8080")))
    assert.isUndefined(exposureWarning(config("[::1]:8080")))
    assert.isUndefined(exposureWarning(config("/run/nativegen/http.sock")))
  })
})

describe("serve's --threads", () => {
  const threads = (args: ReadonlyArray<string>, env: ReadonlyArray<[string, string]> = []) =>
    Options.processCommandLine(serveOptions.threads, args, CliConfig.defaultConfig).pipe(
      Effect.map(([, , value]) => value),
      Effect.withConfigProvider(ConfigProvider.fromMap(new Map(env))),
      Effect.provide(NodeContext.layer)
    )

  it.effect("takes auto or a positive count, from the flag or NATIVEGEN_THREADS, and refuses anything else", () =>
    Effect.gen(function*() {
      assert.strictEqual(yield* threads(["--threads", "auto"]), "auto")
      assert.strictEqual(yield* threads(["--threads", "3"]), 3)
      assert.strictEqual(yield* threads([], [["NATIVEGEN_THREADS", "auto"]]), "auto")
      for (const bad of ["0", "two", "1.5"]) {
        assert.isTrue(Either.isLeft(yield* Effect.either(threads(["--threads", bad]))), bad)
      }
    }))
})

describe("serve's runtime settings", () => {
  it.scoped("the scheduler's NATIVEGEN_SCHEDULER_* settings reach the runtime; --slots overrides its slots", () =>
    Effect.gen(function*() {
      const home = yield* makeHome
      const settings = {
        storeRoot: Path.join(home.dir, "store"),
        trustedKeys: Path.join(home.dir, "keys"),
        trustKeys: [],
        socket: Path.join(home.dir, "s.sock"),
        threads: 1,
        backend: "cpu" as const,
        generationContext: Option.none(),
        decisionContext: Option.none(),
        slots: Option.none(),
        http: Option.none(),
        apiKey: Option.none(),
        apiKeyFile: Option.none()
      }
      const environment = ConfigProvider.fromMap(new Map([["NATIVEGEN_SCHEDULER_ANONYMOUS_SLOTS", "3"], ["NATIVEGEN_SCHEDULER_SLOTS", "4"]]))
      const fromEnv = yield* Effect.withConfigProvider(runtimeOptions(settings, "cpu"), environment)
      assert.strictEqual(fromEnv.scheduler?.anonymousSlots, 3)
      assert.strictEqual(fromEnv.scheduler?.slots, 4)
      const flagged = yield* Effect.withConfigProvider(runtimeOptions({ ...settings, slots: Option.some(6) }, "cpu"), environment)
      assert.strictEqual(flagged.scheduler?.anonymousSlots, 3)
      assert.strictEqual(flagged.scheduler?.slots, 6)
      // Prefill chunks: 128 tokens on the CPU, a whole native batch on a GPU, unless configured.
      assert.strictEqual(fromEnv.worker?.prefillChunk, 128)
      const onCuda = yield* Effect.withConfigProvider(runtimeOptions(settings, "cuda"), environment)
      assert.strictEqual(onCuda.worker?.prefillChunk, onCuda.worker?.child?.batchSize)
      assert.strictEqual(onCuda.worker?.prefillChunk, 512)
      const configured = ConfigProvider.fromMap(new Map([["NATIVEGEN_WORKER_PREFILL_CHUNK", "128"]]))
      assert.strictEqual((yield* Effect.withConfigProvider(runtimeOptions(settings, "cuda"), configured)).worker?.prefillChunk, 128)
      // CUDA graphs: the build decides by default (no childEnv); NATIVEGEN_CUDA_GRAPHS turns them on or off.
      assert.deepStrictEqual(onCuda.worker?.childEnv, {})
      const graphs = (value: string) => ConfigProvider.fromMap(new Map([["NATIVEGEN_CUDA_GRAPHS", value]]))
      assert.deepStrictEqual((yield* Effect.withConfigProvider(runtimeOptions(settings, "cuda"), graphs("true"))).worker?.childEnv, { GGML_CUDA_DISABLE_GRAPHS: "0" })
      assert.deepStrictEqual((yield* Effect.withConfigProvider(runtimeOptions(settings, "cuda"), graphs("false"))).worker?.childEnv, { GGML_CUDA_DISABLE_GRAPHS: "1" })
    }))
})
