/**
 * What a person types in the interactive chat: the session's commands with their refusals, and
 * `"""` blocks of several lines.
 */
import { assert, describe, it } from "@effect/vitest"
import * as fc from "effect/FastCheck"
import * as ChatInput from "../../src/cli/ChatInput.js"

const defaults: ChatInput.SessionSettings = { temperature: 0.7, think: undefined, system: undefined, maxTokens: 256, seed: undefined }

/** Feeds lines one by one; returns the completed inputs. */
const feedAll = (lines: ReadonlyArray<string>) => {
  let block: ChatInput.Block = undefined
  const out: Array<string> = []
  for (const line of lines) {
    const fed = ChatInput.feed(block, line)
    if (fed._tag === "More") {
      block = fed.block
    } else {
      block = undefined
      out.push(fed._tag === "Line" ? `line:${fed.line}` : `block:${fed.text}`)
    }
  }
  return { out, open: block }
}

describe("chat input", () => {
  it("parses the session's commands and settings", () => {
    assert.deepStrictEqual(ChatInput.parseLine("/set temperature 0.2"), { _tag: "Set", change: { key: "temperature", value: 0.2 } })
    assert.deepStrictEqual(ChatInput.parseLine("  /set think off "), { _tag: "Set", change: { key: "think", value: false } })
    assert.deepStrictEqual(ChatInput.parseLine("/set system Be brief.  Really."), {
      _tag: "Set",
      change: { key: "system", value: "Be brief.  Really." }
    })
    assert.deepStrictEqual(ChatInput.parseLine("/set system"), { _tag: "Set", change: { key: "system", value: undefined } })
    assert.deepStrictEqual(ChatInput.parseLine("/set max-tokens 64"), { _tag: "Set", change: { key: "maxTokens", value: 64 } })
    assert.deepStrictEqual(ChatInput.parseLine("/set seed off"), { _tag: "Set", change: { key: "seed", value: undefined } })
    assert.deepStrictEqual(ChatInput.parseLine("/show"), { _tag: "Show" })
    assert.deepStrictEqual(ChatInput.parseLine("/clear"), { _tag: "Clear" })
    assert.deepStrictEqual(ChatInput.parseLine("/bye"), { _tag: "Bye" })
    assert.deepStrictEqual(ChatInput.parseLine("/?"), { _tag: "Help" })
    assert.deepStrictEqual(ChatInput.parseLine(" hello /set "), { _tag: "Message", text: "hello /set" })
  })

  it("refuses what it cannot use, naming the input", () => {
    const reason = (line: string) => {
      const parsed = ChatInput.parseLine(line)
      return parsed._tag === "Invalid" ? parsed.reason : parsed._tag
    }
    assert.strictEqual(reason("/set temperature hot"), "/set temperature hot: expected a number >= 0")
    assert.strictEqual(reason("/set temperature -1"), "/set temperature -1: expected a number >= 0")
    assert.strictEqual(reason("/set temperature"), "/set temperature : expected a number >= 0")
    assert.strictEqual(reason("/set think maybe"), "/set think maybe: expected on or off")
    assert.strictEqual(reason("/set max-tokens 0"), "/set max-tokens 0: expected a whole number >= 1")
    assert.strictEqual(reason("/set colour red"), "/set colour: unknown setting (temperature, think, system, max-tokens, seed)")
    assert.strictEqual(reason("/set"), "/set what? (temperature, think, system, max-tokens, seed)")
    assert.strictEqual(reason("/quit"), "unknown command /quit (/? lists them)")
  })

  it("applies a change and shows the settings", () => {
    const changed = ChatInput.applyChange(ChatInput.applyChange(defaults, { key: "think", value: false }), {
      key: "system",
      value: "Be brief."
    })
    assert.strictEqual(
      ChatInput.settingsText(changed),
      ["temperature  0.7", "think        off", `system       "Be brief."`, "max tokens   256", "seed         -"].join("\n")
    )
  })

  it("reads \"\"\" blocks: opened and closed on their own lines or around text, one line alone", () => {
    assert.deepStrictEqual(feedAll(['"""', "one", "two", '"""']).out, ["block:one\ntwo"])
    assert.deepStrictEqual(feedAll(['"""one', "two", 'three"""']).out, ["block:one\ntwo\nthree"])
    assert.deepStrictEqual(feedAll(['"""just this"""', "after"]).out, ["block:just this", "line:after"])
    assert.deepStrictEqual(feedAll(['"""', "  indented", "", '"""']).out, ["block:  indented\n"])
    assert.deepStrictEqual(feedAll(['"""', "/bye", '"""']).out, ["block:/bye"])
    assert.deepStrictEqual(feedAll(['"""', "open"]), { out: [], open: ["open"] })
  })

  it.prop(
    "lines without a fence are complete as typed; a block gives back its lines joined",
    [fc.array(fc.string().filter((s) => !s.includes('"""') && !s.includes("\n")), { maxLength: 6 })],
    ([lines]) =>
      feedAll(lines).out.join("\u0000") === lines.map((l) => `line:${l}`).join("\u0000") &&
      feedAll(['"""', ...lines, '"""']).out[0] === `block:${lines.join("\n")}`
  )
})
