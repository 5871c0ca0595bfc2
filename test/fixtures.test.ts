import { assert, describe, it } from "@effect/vitest"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { readGgufFileInfo } from "node-llama-cpp"
import { toFloat16Bits } from "../fixtures/gguf.js"
import { ensureModel, generateModel, modelSpecs, pinnedDigests, sha256File } from "../fixtures/models.js"
import { controlTokens, makeVocabulary } from "../fixtures/vocab.js"

describe("generated models", () => {
  it("tiny, decision and small are byte-identical to their pinned digests when generated afresh", () => {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "nativegen-fixtures-"))
    try {
      for (const name of ["tiny", "decision", "small"] as const) {
        const path = Path.join(dir, `${name}.gguf`)
        generateModel(modelSpecs[name], path)
        assert.strictEqual(sha256File(path), pinnedDigests[name], name)
      }
    } finally {
      Fs.rmSync(dir, { recursive: true, force: true })
    }
  })

  it("ensureModel regenerates a cached model whose bytes were changed", () => {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "nativegen-cache-"))
    try {
      const path = ensureModel("tiny", dir)
      const fd = Fs.openSync(path, "r+")
      Fs.writeSync(fd, Buffer.from([0xff]), 0, 1, 4096)
      Fs.closeSync(fd)
      assert.notStrictEqual(sha256File(path), pinnedDigests.tiny)
      assert.strictEqual(sha256File(ensureModel("tiny", dir)), pinnedDigests.tiny)
    } finally {
      Fs.rmSync(dir, { recursive: true, force: true })
    }
  })

  it("node-llama-cpp's GGUF reader reads the architecture, vocabulary and chat template", async () => {
    const info = await readGgufFileInfo(ensureModel("small"))
    assert.strictEqual(info.metadata.general.architecture, "llama")
    const vocab = makeVocabulary()
    assert.deepStrictEqual(info.metadata.tokenizer.ggml.tokens, vocab.tokens)
    assert.include(String(info.metadata.tokenizer.chat_template), "<|im_start|>")
    assert.strictEqual(info.tensorInfo?.length, 2 + 9 * modelSpecs.small.layers + 1)
  })

  it("the vocabulary has byte fallback, the space piece, word pieces and channel control tokens", () => {
    const vocab = makeVocabulary()
    assert.strictEqual(vocab.tokens.filter((t) => /^<0x[0-9A-F]{2}>$/.test(t)).length, 256)
    assert.include(vocab.tokens, "\u2581")
    assert.include(vocab.tokens, "\u2581the")
    for (const token of Object.values(controlTokens)) assert.include(vocab.tokens, token)
    assert.isAbove(vocab.tokens.length, 500)
  })

  it("float16 conversion rounds to nearest even and keeps specials", () => {
    assert.strictEqual(toFloat16Bits(1), 0x3c00)
    assert.strictEqual(toFloat16Bits(-2), 0xc000)
    assert.strictEqual(toFloat16Bits(65504), 0x7bff)
    assert.strictEqual(toFloat16Bits(1e9), 0x7c00)
    assert.strictEqual(toFloat16Bits(Number.NaN) & 0x7c00, 0x7c00)
    assert.strictEqual(toFloat16Bits(2 ** -24), 0x0001)
    assert.strictEqual(toFloat16Bits(1 + 2 ** -11), 0x3c00) // a tie rounds to even
    assert.strictEqual(toFloat16Bits(1 + 3 * 2 ** -11), 0x3c02)
  })
})
