/**
 * The web console in a real browser (Debian's headless Chromium through playwright-core) against
 * a real server: the store-backed runtime with the seed. Each page loads and works in a narrow
 * window (nothing wider than the viewport) without a script error; a chat streams, and stopping
 * it (Escape, or the Stop button) stops the engine; a SIGKILLed engine child's repair appears on
 * the status page.
 *
 * Screenshots are saved under `.cache/artifacts/console/` (git-ignored): status.png, chat.png,
 * decide.png, models.png, repaired.png.
 */
import * as HttpServerTag from "@effect/platform/HttpServer"
import { assert, describe, layer } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { type Browser, chromium, type Page } from "playwright-core"
import { HttpConfig } from "../../src/http/HttpConfig.js"
import * as Http from "../../src/http/Server.js"
import { Provider } from "../../src/services/Provider.js"
import { Store } from "../../src/services/Store.js"
import { awaitGone } from "../support/processes.js"
import { HttpSeeded } from "./seeded.js"

const chromiumPath = "/usr/bin/chromium"
/** The seed chat model's scripted reply. */
const REPLY = "Hello! I am the nativegen seed model."
/** A JSON schema with an unbounded string: under it the scripted model writes until max tokens. */
const longJson = { type: "json_schema", json_schema: { name: "long", schema: { type: "object", properties: { text: { type: "string" } } } } }
export const artifacts = Path.resolve(import.meta.dirname, "..", "..", ".cache", "artifacts", "console")

const apiKey = "console-test-key"

/** A narrow window, as on a phone held upright or a side panel. */
const viewport = { width: 420, height: 860 }

class Chromium extends Context.Tag("test/Chromium")<Chromium, Browser>() {
  static readonly layer = Layer.scoped(
    Chromium,
    Effect.acquireRelease(
      Effect.promise(() => chromium.launch({ executablePath: chromiumPath, args: ["--no-sandbox"] })),
      (browser) => Effect.promise(() => browser.close())
    )
  )
}

/**
 * A page of the console in a fresh browser context, closed with the scope; fails the test on any
 * script error or console error the page reports.
 */
const openPage = (hash: string, options: { readonly server?: string; readonly allowed?: RegExp } = {}) =>
  Effect.gen(function*() {
    const browser = yield* Chromium
    const baseUrl = options.server ?? (yield* HttpSeeded).baseUrl
    const context = yield* Effect.acquireRelease(
      Effect.promise(() => browser.newContext({ viewport })),
      (context) => Effect.promise(() => context.close())
    )
    const page = yield* Effect.promise(() => context.newPage())
    const errors: Array<string> = []
    page.on("pageerror", (error) => errors.push(error.message))
    page.on("console", (message) => {
      if (message.type() === "error" && options.allowed?.test(message.text()) !== true) errors.push(message.text())
    })
    yield* Effect.addFinalizer(() => Effect.sync(() => assert.deepStrictEqual(errors, [], "errors in the page")))
    yield* Effect.promise(() => page.goto(`${baseUrl}/#/${hash}`))
    return page
  })

const run = <A>(f: () => Promise<A>) => Effect.promise(f)

/** Nothing is wider than the window: no sideways scrolling. */
const fitsTheWindow = (page: Page) =>
  Effect.gen(function*() {
    const widths = yield* run(() =>
      page.evaluate<{ content: number; window: number }>("({ content: document.documentElement.scrollWidth, window: window.innerWidth })")
    )
    assert.isAtMost(widths.content, widths.window, "the page scrolls sideways")
  })

const screenshot = (page: Page, name: string) =>
  run(() => page.screenshot({ path: Path.join(artifacts, name), fullPage: true }))

describe("web console in Chromium", () => {
  Fs.mkdirSync(artifacts, { recursive: true })
  layer(Layer.merge(HttpSeeded.layer(), Chromium.layer), { timeout: 240_000, excludeTestServices: true })((it) => {
    it.scoped("status: the engine, the models, the memory budget, lanes and plots, live", () =>
      Effect.gen(function*() {
        const page = yield* openPage("status")
        const { provider } = yield* HttpSeeded
        const readiness = yield* provider.readiness
        yield* run(() => page.locator("#engine-state[data-state=ready]").waitFor())
        assert.strictEqual(yield* run(() => page.locator("#engine-incarnation").textContent()), String(readiness.engine.incarnation))
        assert.strictEqual(yield* run(() => page.locator("#engine-pid").textContent()), String(readiness.engine.pid))
        assert.strictEqual(yield* run(() => page.locator("[data-role=generation] .role-model").textContent()), "qwen-chat")
        assert.strictEqual(yield* run(() => page.locator("[data-role=decision] .role-model").textContent()), "qwen-decision")
        assert.match((yield* run(() => page.locator("[data-role=generation]").textContent())) ?? "", /Revision1.*2048 tokens admitted of a cap of 2048/)
        assert.match((yield* run(() => page.locator("#memory .bar").getAttribute("aria-label"))) ?? "", /^Weights .*KV cache .*free/)
        assert.strictEqual(yield* run(() => page.locator("#lanes tbody tr").count()), 4)
        assert.strictEqual(yield* run(() => page.locator("#scheduler-running").textContent()), "0")
        // Memory over time grows by a sample a second.
        yield* run(() => page.locator("#memory-time circle").nth(2).waitFor({ timeout: 20_000 }))
        // Arriving on a page puts the focus on its heading.
        assert.isTrue(yield* run(() => page.evaluate<boolean>("document.activeElement === document.querySelector('main h1')")))
        yield* fitsTheWindow(page)
        yield* screenshot(page, "status.png")
      }))

    it.scoped("chat: the reply streams in, the thoughts collapsed, then the usage line with the reuse kind and first-token time", () =>
      Effect.gen(function*() {
        const page = yield* openPage("chat")
        const message = page.getByRole("textbox", { name: "Message" })
        yield* run(() => message.fill("Hi there"))
        yield* run(() => message.press("Enter"))
        const reply = page.locator(".message.assistant").last()
        const usage = reply.locator(".usage")
        yield* run(() => usage.filter({ hasText: "first token" }).waitFor())
        assert.include((yield* run(() => reply.locator(".answer").textContent())) ?? "", REPLY)
        const thoughts = reply.locator("details")
        assert.isFalse(yield* run(() => thoughts.evaluate((d) => d.hasAttribute("open"))), "the thoughts start collapsed")
        assert.isAbove(((yield* run(() => thoughts.locator(".thought").textContent())) ?? "").length, 0)
        assert.match((yield* run(() => usage.textContent())) ?? "", /prompt tokens \(\d+ reused, (cold|prefix)\) · \d+ generated · first token [\d.]+ m?s/)

        // The next turn resends the history under the chat's conversation key: it continues the cache.
        yield* run(() => message.fill("And again?"))
        yield* run(() => page.getByRole("button", { name: "Send" }).click())
        yield* run(() => page.locator(".message.assistant").nth(1).locator(".usage").filter({ hasText: "continuation" }).waitFor())
        assert.isTrue(yield* run(() => page.evaluate<boolean>("document.activeElement === document.getElementById('chat-input')")))
        // The thoughts open from the keyboard.
        yield* run(() => thoughts.locator("summary").focus())
        yield* run(() => page.keyboard.press("Enter"))
        assert.isTrue(yield* run(() => thoughts.evaluate((d) => d.hasAttribute("open"))))
        yield* fitsTheWindow(page)
        yield* screenshot(page, "chat.png")
      }))

    it.scoped("chat: Escape, then the Stop button, stop a reply mid-stream, and the engine stops", () =>
      Effect.gen(function*() {
        const page = yield* openPage("chat")
        const { provider } = yield* HttpSeeded
        // An unbounded string under a JSON schema: the scripted model fills it until max tokens.
        yield* run(() => page.getByText("Options").click())
        yield* run(() => page.getByLabel("Max tokens").fill("1500"))
        yield* run(() => page.getByLabel("More request fields (a JSON object)").fill(JSON.stringify({ response_format: longJson })))
        const stopped = Effect.gen(function*() {
          const readiness = yield* provider.readiness.pipe(
            Effect.filterOrFail((r) => r.scheduler.running === 0),
            Effect.retry({ schedule: Schedule.spaced("20 millis") }),
            Effect.timeout("10 seconds")
          )
          assert.strictEqual(readiness.scheduler.running, 0)
        })
        for (const [n, stop] of [[0, () => page.keyboard.press("Escape")], [1, () => page.getByRole("button", { name: "Stop" }).click()]] as const) {
          yield* run(() => page.getByRole("textbox", { name: "Message" }).fill(`Write a long text, please (${n}).`))
          yield* run(() => page.getByRole("textbox", { name: "Message" }).press("Enter"))
          const answer = page.locator(".message.assistant").nth(n).locator(".answer")
          // Streamed: the text grows while the reply runs.
          yield* run(() => answer.filter({ hasText: /.{20}/ }).waitFor())
          const early = ((yield* run(() => answer.textContent())) ?? "").length
          yield* run(() => answer.filter({ hasText: new RegExp(`.{${early + 20}}`) }).waitFor())
          assert.strictEqual((yield* provider.readiness).scheduler.running, 1)
          yield* run(stop)
          yield* run(() => page.locator(".message.assistant").nth(n).locator(".usage").filter({ hasText: "stopped" }).waitFor())
          yield* stopped
          assert.isTrue(yield* run(() => page.getByRole("button", { name: "Send" }).isEnabled()))
          assert.isTrue(yield* run(() => page.getByRole("button", { name: "Stop" }).isDisabled()))
        }
      }))

    it.scoped("decide: a probability bar per label of each head", () =>
      Effect.gen(function*() {
        const page = yield* openPage("decide")
        yield* run(() => page.getByLabel("Prompt").fill("The soup was cold and the waiter was rude."))
        yield* run(() => page.getByRole("button", { name: "Add head" }).click())
        yield* run(() => page.getByLabel("Head").nth(1).fill("topic"))
        yield* run(() => page.getByLabel("Labels (comma-separated)").nth(1).fill("food, travel"))
        yield* run(() => page.getByRole("button", { name: "Decide" }).click())
        const meters = page.getByRole("meter")
        yield* run(() => meters.first().waitFor())
        assert.strictEqual(yield* run(() => meters.count()), 5)
        const sentiment = yield* run(() =>
          page.locator("[data-head=sentiment] [role=meter]").evaluateAll((ms) => ms.map((m) => Number(m.getAttribute("aria-valuenow"))))
        )
        assert.closeTo(sentiment.reduce((a, b) => a + b, 0), 100, 0.5)
        yield* fitsTheWindow(page)
        yield* screenshot(page, "decide.png")
      }))

    it.scoped("models: the active models with their signer; verify hashes them", () =>
      Effect.gen(function*() {
        const page = yield* openPage("models")
        const chat = page.locator("[data-model=qwen-chat]")
        yield* run(() => chat.waitFor())
        assert.match((yield* run(() => chat.textContent())) ?? "", /generation \(running now\).*ed25519:/)
        yield* run(() => chat.getByRole("button", { name: "Verify qwen-chat" }).click())
        yield* run(() => chat.getByText("Verified: every artifact hashes to its digest.").waitFor())
        yield* fitsTheWindow(page)
        yield* screenshot(page, "models.png")
      }))

    it.scoped("with an API key: the console asks for it once, keeps it for the tab, and every fetch sends it", () =>
      Effect.gen(function*() {
        const { provider, store } = yield* HttpSeeded
        // A second server over the same runtime, with a key.
        const context = yield* Layer.build(
          Http.layer({ ...HttpConfig.defaults, listen: { _tag: "Tcp", host: "127.0.0.1", port: 0 }, apiKey: Redacted.make(apiKey) }).pipe(
            Layer.provide(Layer.merge(Layer.succeed(Provider, provider), Layer.succeed(Store, store)))
          )
        )
        const address = Context.get(context, HttpServerTag.HttpServer).address
        assert(address._tag === "TcpAddress")
        const page = yield* openPage("status", {
          server: `http://127.0.0.1:${address.port}`,
          // The browser reports each refused fetch; the console answers it with the dialog.
          allowed: /status of 401/
        })
        const dialog = page.getByRole("dialog")
        const keyField = dialog.getByLabel("API key")
        // A wrong key is refused and asked again.
        yield* run(() => keyField.fill("not the key"))
        yield* run(() => keyField.press("Enter"))
        yield* run(() => dialog.getByText("The key was refused").waitFor())
        yield* run(() => keyField.fill(apiKey))
        yield* run(() => dialog.getByRole("button", { name: "Use key" }).click())
        yield* run(() => page.locator("#engine-state[data-state=ready]").waitFor())
        // Another page of the same tab: no question; its fetches carry the key.
        yield* run(() => page.getByRole("link", { name: "Models" }).click())
        yield* run(() => page.locator("[data-model=qwen-chat]").waitFor())
        assert.strictEqual(yield* run(() => dialog.count()), 0)
      }))

    it.scoped("SIGKILL of the engine child: the repair appears on the status page", () =>
      Effect.gen(function*() {
        const page = yield* openPage("status")
        yield* run(() => page.locator("#engine-state[data-state=ready]").waitFor())
        const pid = Number(yield* run(() => page.locator("#engine-pid").textContent()))
        const incarnation = Number(yield* run(() => page.locator("#engine-incarnation").textContent()))
        process.kill(pid, "SIGKILL")
        yield* awaitGone(pid)
        const repair = page.locator("#recovery-actions li[data-kind=exit]")
        yield* run(() => repair.waitFor({ timeout: 120_000 }))
        assert.match((yield* run(() => repair.textContent())) ?? "", new RegExp(`engine child ${pid} .*SIGKILL`))
        yield* run(() => page.locator("#engine-state[data-state=ready]").waitFor({ timeout: 120_000 }))
        yield* run(() => page.locator("#recovery-actions li[data-kind=exit][data-outcome=replaced]").waitFor())
        assert.strictEqual(Number(yield* run(() => page.locator("#engine-incarnation").textContent())), incarnation + 1)
        yield* screenshot(page, "repaired.png")
      }))
  })
})
