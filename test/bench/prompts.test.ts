/** The peer benchmark's prompts: deterministic per seed, sized in words, and the follow-up extends its history. */
import { assert, describe, it } from "@effect/vitest"
import * as fc from "effect/FastCheck"
import { chatMl, followUp, history, userPrompt, wordsOf } from "../../bench/peer/Prompts.js"

describe("bench/peer Prompts", () => {
  it.prop("the same seed gives the same words, as many as asked", [fc.string(), fc.nat({ max: 500 })], ([seed, n]) => {
    const a = wordsOf(seed, n)
    return a === wordsOf(seed, n) && (n === 0 ? a === "" : a.split(" ").length === n)
  })

  it("different seeds give different text", () => {
    assert.notStrictEqual(wordsOf("a", 50), wordsOf("b", 50))
    assert.notStrictEqual(userPrompt("round/1", 20)[0]!.content, userPrompt("round/2", 20)[0]!.content)
  })

  it("the history is system, user, assistant, user of about the asked size; the follow-up keeps it as its prefix", () => {
    const h = history("s", 1000)
    assert.deepStrictEqual(h.map((m) => m.role), ["system", "user", "assistant", "user"])
    const words = h.reduce((n, m) => n + m.content.split(" ").length, 0)
    assert.strictEqual(words, 1000)
    const next = followUp("s", h, "reply", 30)
    assert.deepStrictEqual(next.slice(0, 4), h)
    assert.deepStrictEqual(next.slice(4).map((m) => [m.role, m.content.split(" ").length]), [["assistant", 1], ["user", 30]])
  })

  it("ChatML: each message in its markers, then the assistant's generation prompt", () => {
    assert.strictEqual(chatMl([{ role: "user", content: "hi" }]), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
  })
})
