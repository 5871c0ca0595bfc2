/**
 * The command-line habits of issue 17, as a person uses them against a running server:
 * `show`, `ps`, `list`/`ls`, `rm`, and the interactive chat typed into a real terminal (tmux:
 * send-keys, capture-pane), Ctrl-C in the middle of an answer included.
 *
 * The server's generation model is `my-chat`: the seed's random-weights Qwen3 model
 * (qwen-decision's file, real tokenizer and chat template) signed with the user's own key and
 * activated before the server starts. Its answers run on until the token limit, long enough to
 * interrupt by hand; the seed's scripted `qwen-chat` ends its reply within 26 tokens, faster than
 * a person (or tmux) presses Ctrl-C. The decision role is the seed's.
 */
import { assert, layer } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { ensureModel, pinnedDigests } from "../../fixtures/models.js"
import type * as Ps from "../../src/cli/Ps.js"
import * as Width from "../../src/cli/Width.js"
import { Readiness } from "../../src/domain/Inference.js"
import * as Signing from "../../src/services/store/Signing.js"
import { makeStore } from "../store/helpers.js"
import {
  bin,
  type Home,
  makeHome,
  openPane,
  type Pane,
  run,
  type Server,
  smallServerEnv,
  startServer,
  tmuxUnavailable
} from "./support.js"

interface Fixture {
  readonly home: Home
  readonly server: Server
  /** The user's key, which signed `my-chat`. */
  readonly keyId: string
  readonly manifestDigest: string
}

class TestFixture extends Context.Tag("test/HabitsFixture")<TestFixture, Fixture>() {}

const setUp = Effect.gen(function*() {
  const home = yield* makeHome
  const generated = yield* run(["keys", "generate"], { env: home.env })
  assert.strictEqual(generated.code, 0, generated.stderr)
  const keyDir = Path.join(home.env.XDG_DATA_HOME!, "nativegen", "keys")
  const publicKey = Path.join(keyDir, Fs.readdirSync(keyDir).find((f) => f.endsWith(".pub"))!)
  const trusted = yield* run(["keys", "trust", publicKey], { env: home.env })
  assert.strictEqual(trusted.code, 0, trusted.stderr)
  const model = ensureModel("qwen-decision")
  const manifest = Path.join(home.dir, "my-chat.manifest.json")
  const signed = yield* run(["keys", "sign", "--name", "my-chat", "--out", manifest, model], { env: home.env })
  assert.strictEqual(signed.code, 0, signed.stderr)
  const pem = Fs.readFileSync(publicKey, "utf8")
  // Staged and activated before the server starts, so the server loads it for generation.
  const activation = yield* Effect.scoped(Effect.gen(function*() {
    const store = yield* makeStore(Path.join(home.env.XDG_DATA_HOME!, "nativegen", "store"), [], { trustedKeys: [pem] })
    yield* store.stage(model, pinnedDigests["qwen-decision"], Fs.statSync(model).size)
    return yield* store.activate(Fs.readFileSync(manifest, "utf8"))
  }))
  // A generation context large enough for an answer of 4000 tokens: long to write even on a fast machine.
  const server = yield* startServer(home, { ...smallServerEnv, NATIVEGEN_ADMISSION_GENERATION_CONTEXT_CAP: "4096" })
  return {
    home,
    server,
    keyId: Either.getOrThrow(Signing.publicKeyFromPem(pem)).keyId,
    manifestDigest: activation.manifestDigest
  } satisfies Fixture
})

const decodeReadiness = Schema.decodeUnknownSync(Readiness)

const readiness = (home: Home) =>
  Effect.map(run(["status", "--json"], { env: home.env }), (result) => decodeReadiness(JSON.parse(result.stdout)))

/** The usage lines the chat printed after each completed answer. */
const usageLines = (text: string) => text.match(/^\d+ tokens · prompt \d+ .*· stop: .*$/gm) ?? []

const shellQuote = (arg: string) => `'${arg.replaceAll("'", `'\\''`)}'`

/** `nativegen chat ...args` in a terminal; `[exited N]` shows when it ends. */
const chatPane = (home: Home, args: ReadonlyArray<string>) =>
  openPane(
    `${[process.execPath, bin, "chat", ...args].map(shellQuote).join(" ")}; echo "[exited $?]"; exec sleep 600`,
    home.env
  )

/** Types a line and presses Enter. */
const enter = (pane: Pane, line: string) => Effect.zipRight(pane.type(line), pane.keys("Enter"))

/** Waits for the prompt at the end of the pane (`>>> ` or `... `), nothing typed after it. */
const promptShown = (text: string, prompt = ">>>") => text.trimEnd().split("\n").at(-1)?.trimEnd() === prompt

layer(Layer.scoped(TestFixture, setUp), { timeout: "240 seconds", excludeTestServices: true })(
  "nativegen show, ps, list, rm and the interactive chat",
  (it) => {
    it.effect("ps shows each role's model, device, memory charged, context and uptime; --json the same", () =>
      Effect.gen(function*() {
        const { home, server } = yield* TestFixture
        const text = yield* run(["ps"], { env: home.env })
        assert.strictEqual(text.code, 0, text.stderr)
        assert.match(text.stdout, /^role {8}model {10}revision {2}device\s+weights\s+kv {2}context {2}up$/m)
        assert.match(text.stdout, /^generation {2}my-chat {8}\s+1 {2}cpu\/cpu\s+[\d.]+ MiB\s+[\d.]+ MiB\s+4096 {2}[\d.]+ (s|min .*)$/m)
        assert.match(text.stdout, /^decision {4}qwen-decision\s+1 {2}cpu\/cpu\s+[\d.]+ MiB\s+[\d.]+ MiB\s+512 {2}/m)
        assert.match(text.stdout, new RegExp(`^engine {4}ready, incarnation 1, pid ${server.enginePid}, cpu backend, up `, "m"))
        assert.match(text.stdout, /^memory {4}cpu: [\d.]+ MiB charged of [\d.]+ GiB \(weights [\d.]+ MiB, kv [\d.]+ MiB, workspace [\d.]+ \w+\), [\d.]+ GiB free$/m)
        const json = JSON.parse((yield* run(["ps", "--json"], { env: home.env })).stdout) as ReturnType<typeof Ps.processes>
        assert.deepStrictEqual(json.models.map((m) => [m.role, m.model, m.device, m.backend, m.admittedContext]), [
          ["generation", "my-chat", "cpu", "cpu", 4096],
          ["decision", "qwen-decision", "cpu", "cpu", 512]
        ])
        for (const m of json.models) {
          assert.isAbove(m.weightsBytes ?? 0, 0)
          assert.isAbove(m.kvBytes ?? 0, 0)
          assert.isBelow(Date.parse(m.since), Date.now())
        }
        // The per-role charges are part of the device's charges by kind.
        assert.isAtLeast(json.memory!.weightsBytes, json.models.reduce((sum, m) => sum + (m.weightsBytes ?? 0), 0))
        assert.strictEqual(json.memory!.chargedBytes, json.memory!.weightsBytes + json.memory!.kvBytes + json.memory!.workspaceBytes)
      }))

    it.effect("show describes each role's model from its GGUF header, manifest, signer and admitted context", () =>
      Effect.gen(function*() {
        const { home, keyId, manifestDigest } = yield* TestFixture
        const text = yield* run(["show"], { env: home.env })
        assert.strictEqual(text.code, 0, text.stderr)
        const [generation, decision] = text.stdout.split("\n\n")
        const fields = [
          "my-chat (generation)",
          "  architecture      qwen3",
          "  parameters        19.5M",
          "  quantization      Q4_0",
          "  trained context   40960",
          "  admitted context  4096 (cap 4096, limited by cap)",
          "  license           -",
          `  manifest          ${manifestDigest} (revision 1)`,
          `  signed by         ${keyId}`,
          "  loaded            yes, by the running server",
          "  template          {%- if tools %}"
        ]
        assert.deepStrictEqual(generation!.split("\n").slice(0, fields.length), fields)
        assert.match(generation!, /\n {20}… \d+ more lines \(--template shows them all\)$/)
        assert.match(decision!, /^qwen-decision \(decision\)\n {2}architecture {6}qwen3\n/)
        assert.match(decision!, /\n {2}admitted context {2}512 \(cap 512, limited by cap\)\n/)
        assert.match(decision!, /\n {2}signed by {9}ed25519:[0-9a-f]+\n/)
        // One model by name; --template prints all of it, --json has every field and the whole template.
        const full = yield* run(["show", "my-chat", "--template"], { env: home.env })
        assert.include(full.stdout, "{{- '<|im_start|>assistant\\n' }}")
        assert.notInclude(full.stdout, "more lines")
        const json = JSON.parse((yield* run(["show", "my-chat", "--json"], { env: home.env })).stdout) as Array<Record<string, unknown>>
        assert.strictEqual(json.length, 1)
        assert.deepStrictEqual(
          [json[0]!.model, json[0]!.architecture, json[0]!.quantization, json[0]!.fileType, json[0]!.trainedContext, json[0]!.admittedContext, json[0]!.keyId],
          ["my-chat", "qwen3", "Q4_0", 2, 40960, 4096, keyId]
        )
        assert.include(String(json[0]!.chatTemplate), "enable_thinking")
        const missing = yield* run(["show", "nope"], { env: home.env })
        assert.strictEqual(missing.code, 1)
        assert.include(missing.stderr, `nativegen: no active model is named "nope" (see \`nativegen list\`)`)
      }))

    it.effect("list and ls print what store list prints", () =>
      Effect.gen(function*() {
        const { home } = yield* TestFixture
        const store = yield* run(["store", "list"], { env: home.env })
        for (const alias of ["list", "ls"]) {
          const listed = yield* run([alias], { env: home.env })
          assert.strictEqual(listed.code, 0, listed.stderr)
          assert.strictEqual(listed.stdout, store.stdout, alias)
          assert.strictEqual(listed.stderr, store.stderr, alias)
        }
        assert.match(store.stdout, /^generation {2}my-chat {2}/m)
      }))

    it.effect.skipIf(tmuxUnavailable !== undefined)("in a narrow terminal, the tables of list, ps and status fit its width, cut with …", () =>
      Effect.scoped(Effect.gen(function*() {
        const { home } = yield* TestFixture
        // stdout only: `ls` says on stderr how it reached the store, a message (wrapped, never cut).
        const commands = [["ls"], ["ps"], ["status"]].map((args) => `${[process.execPath, bin, ...args].map(shellQuote).join(" ")} 2>/dev/null`)
        const pane = yield* openPane(`${commands.join("; ")}; echo "[done]"; exec sleep 600`, home.env, { columns: 48, rows: 60 })
        const shown = yield* pane.waitFor("the three commands' output", (t) => t.includes("[done]"))
        // capture-pane joins wrapped lines (-J): a line wider than the terminal would show here whole.
        const lines = shown.split("\n")
        assert.deepStrictEqual(lines.filter((line) => Width.displayWidth(line) > 48), [])
        assert.isAbove(lines.filter((line) => line.endsWith("…")).length, 3)
        // The naming columns stay whole; the wide ones are cut first, then the ends of the lines.
        assert.match(shown, /^generation {2}my-chat {8}\s+1 {2}cpu/m)
        assert.match(shown, /^generation {2}my-chat\s+1 {2}cpu\/cpu\s/m)
      })))

    it.effect.skipIf(tmuxUnavailable !== undefined)(
      "interactive chat in a terminal: turns that continue the conversation, /set, /show, /clear, \"\"\" blocks, history, /bye",
      () =>
        Effect.scoped(Effect.gen(function*() {
          const { home } = yield* TestFixture
          const pane = yield* chatPane(home, ["-t", "0", "-n", "12"])
          yield* pane.waitFor("the banner and a prompt", (t) => t.includes("chat with my-chat revision 1 (generation)") && promptShown(t))
          const answered = (count: number) => (t: string) => usageLines(t).length === count && promptShown(t)

          yield* enter(pane, "Hello there")
          let shown = yield* pane.waitFor("the first answer", answered(1))
          assert.match(usageLines(shown)[0]!, /^12 tokens · prompt \d+ \(cold\) · /)
          yield* enter(pane, "Tell me more")
          shown = yield* pane.waitFor("the second answer", answered(2))
          // The second turn continued the first: everything the first left in the sequence was reused.
          assert.match(usageLines(shown)[1]!, /^12 tokens · prompt \d+ \(\d+ reused: continuation\) · /)

          yield* enter(pane, "/set temperature 0.5")
          yield* pane.waitFor("the setting", (t) => t.includes("set temperature") && promptShown(t))
          yield* enter(pane, "/set system Answer in one line.")
          yield* enter(pane, "/set think off")
          yield* pane.waitFor("the settings", (t) => t.includes("set think") && promptShown(t))
          yield* enter(pane, "/show")
          shown = yield* pane.waitFor("/show", (t) => t.includes("conversation cli-") && promptShown(t))
          assert.include(shown, "model        my-chat revision 1 (generation) on ")
          assert.include(shown, "temperature  0.5\n")
          assert.include(shown, "think        off\n")
          assert.include(shown, `system       "Answer in one line."\n`)
          assert.match(shown, /conversation cli-[0-9a-f-]+ \(2 turns\)/)

          yield* enter(pane, "/clear")
          yield* pane.waitFor("a new conversation", (t) => t.includes("a new conversation") && promptShown(t))
          yield* enter(pane, "Hello again")
          shown = yield* pane.waitFor("the first answer of the new conversation", answered(3))
          assert.notInclude(usageLines(shown)[2]!, "continuation")

          // A message of several lines between """ lines, with the continuation prompt in between.
          yield* enter(pane, '"""The first line')
          yield* pane.waitFor("the continuation prompt", (t) => promptShown(t, "..."))
          yield* enter(pane, "the second line")
          yield* pane.waitFor("the continuation prompt again", (t) => promptShown(t, "..."))
          yield* enter(pane, '"""')
          shown = yield* pane.waitFor("the answer to the block", answered(4))
          assert.match(usageLines(shown)[3]!, /\(\d+ reused: continuation\)/)

          // History: Up recalls the lines typed before, newest first; Enter sends the recalled one.
          yield* pane.keys("Up")
          yield* pane.waitFor("the last line recalled", (t) => t.trimEnd().endsWith('>>> """'))
          yield* pane.keys("Up")
          yield* pane.waitFor("the line before recalled", (t) => t.trimEnd().endsWith(">>> the second line"))
          yield* pane.keys("Enter")
          yield* pane.waitFor("the answer to the recalled line", answered(5))

          yield* enter(pane, "/bye")
          yield* pane.waitFor("the chat to end", (t) => t.includes("[exited 0]"))
        })),
      { timeout: 180_000 }
    )

    it.effect.skipIf(tmuxUnavailable !== undefined)(
      "Ctrl-C in the middle of an answer stops it and the engine; Ctrl-C at an empty prompt hints, a second one leaves",
      () =>
        Effect.scoped(Effect.gen(function*() {
          const { home, server } = yield* TestFixture
          const pane = yield* chatPane(home, ["-t", "0", "-n", "4000"])
          yield* pane.waitFor("a prompt", (t) => promptShown(t))
          yield* enter(pane, "Tell me a long story")
          // Ctrl-C as soon as the answer shows (the pane is polled every 50 ms).
          yield* pane.waitFor("answer text", (t) => /Tell me a long story\n.*\S/.test(t), "60 seconds")
          yield* pane.keys("C-c")
          const shown = yield* pane.waitFor("(stopped) and a prompt", (t) => t.includes("(stopped)") && promptShown(t), "30 seconds")
          // Stopped in the middle: a finished answer would have printed its usage line first.
          assert.deepStrictEqual(usageLines(shown), [], "the stopped answer never finished")
          // The server's readiness shows nothing running, the same engine (a cancel, not a crash).
          const after = yield* Effect.flatMap(readiness(home), (r) =>
            r.scheduler.running === 0 && r.scheduler.queued === 0 ? Effect.succeed(r) : Effect.fail(r.scheduler)).pipe(
              Effect.retry(Schedule.spaced("50 millis").pipe(Schedule.upTo("10 seconds"))),
              Effect.orDie
            )
          assert.strictEqual(after.engine.pid, server.enginePid)
          assert.strictEqual(after.engine.incarnation, 1)
          // The session goes on.
          yield* enter(pane, "/set max-tokens 4")
          yield* enter(pane, "Hello")
          yield* pane.waitFor("an answer after the stop", (t) => usageLines(t).length === 1 && promptShown(t))
          // Ctrl-C at an empty prompt: a hint; a second one leaves.
          yield* pane.keys("C-c")
          yield* pane.waitFor("the hint", (t) => t.includes("(Ctrl-C again, Ctrl-D or /bye to leave)") && promptShown(t))
          yield* pane.keys("C-c")
          yield* pane.waitFor("the chat to end", (t) => t.includes("[exited 0]"))
        })),
      { timeout: 120_000 }
    )

    it.effect("rm deactivates the model (the running server keeps it loaded); show and ls follow the store", () =>
      Effect.gen(function*() {
        const { home, manifestDigest } = yield* TestFixture
        const removed = yield* run(["rm", "my-chat"], { env: home.env })
        assert.strictEqual(removed.code, 0, removed.stderr)
        assert.strictEqual(
          removed.stdout,
          [
            `removed my-chat revision 1 (generation) on cpu: manifest ${manifestDigest}`,
            // The file is the seed's qwen-decision too: still named by an active manifest.
            "no blob to collect (another active model names them)",
            "the running server keeps it loaded, and its lease on the blobs, until it restarts"
          ].join("\n") + "\n"
        )
        const listed = yield* run(["ls"], { env: home.env })
        assert.notInclude(listed.stdout, "my-chat")
        const shown = yield* run(["show", "my-chat"], { env: home.env })
        assert.strictEqual(shown.code, 0, shown.stderr)
        assert.include(
          shown.stdout,
          "  note              the server runs it for generation, but it is no longer active in the store (it stays loaded until the server restarts)"
        )
        assert.include(shown.stdout, "  signed by         -")
        const again = yield* run(["store", "rm", "my-chat", "--json"], { env: home.env })
        assert.strictEqual(again.code, 1)
        assert.include(again.stderr, "nativegen: nothing is active for model:my-chat on device cpu")
        const seed = yield* run(["rm", "qwen-decision"], { env: home.env })
        assert.strictEqual(seed.code, 1)
        assert.include(seed.stderr, "nativegen: qwen-decision is a model of the packaged seed and cannot be removed")
      }))
  }
)
