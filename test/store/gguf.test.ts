/**
 * The GGUF header check (issue 12, item 7): the generated models pass; a file cut anywhere before
 * the end of its tensor data, a wrong magic or version, an unknown tensor type, a missing
 * architecture or a tensor table pointing past the end are refused with the reason; and the
 * store refuses to activate such a file as a GGUF model, journaling nothing.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Stream from "effect/Stream"
import * as fc from "effect/FastCheck"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { ensureModel } from "../../fixtures/models.js"
import { type MetadataValue, writeGguf } from "../../fixtures/gguf.js"
import { constantValues } from "../../fixtures/random.js"
import * as GgufHeader from "../../src/domain/GgufHeader.js"
import { Artifact, ggufMediaType, Manifest } from "../../src/domain/Manifest.js"
import { envelope, makeKey, makeStore, sha256, tempDir } from "./helpers.js"

const readBuffer = (bytes: Uint8Array, windowBytes?: number) =>
  GgufHeader.read((position, length) => bytes.subarray(position, position + length), bytes.length, windowBytes)

const reasonOf = (result: Either.Either<GgufHeader.GgufHeader, GgufHeader.GgufDefect>) =>
  Either.match(result, { onLeft: (d) => d.reason, onRight: () => "accepted" })

/** A small valid GGUF: two f32 tensors, an architecture, and whatever extra metadata is asked for. */
const smallGguf = (
  dir: string,
  options: { readonly architecture?: string | undefined; readonly extra?: ReadonlyArray<readonly [string, MetadataValue]> } = {}
) => {
  const path = Path.join(dir, `small-${Math.random().toString(36).slice(2)}.gguf`)
  writeGguf(
    path,
    [
      ...(options.architecture === undefined ? [] : [["general.architecture", { type: "string", value: options.architecture }] as const]),
      ["general.name", { type: "string", value: "t" }],
      ...(options.extra ?? []),
      ["tokenizer.ggml.tokens", { type: "string[]", value: ["a", "b", "c"] }]
    ],
    [
      { name: "a.weight", dims: [8, 2], type: "f32", data: constantValues(1) },
      { name: "b.weight", dims: [4], type: "f16", data: constantValues(0.5) }
    ]
  )
  return Fs.readFileSync(path)
}

/** The byte offset of the u32 right after tensor `name`'s dimensions (its type id). */
const tensorTypeOffset = (bytes: Buffer, name: string, dims: number) => {
  const at = bytes.indexOf(Buffer.from(name, "utf8"))
  return at + name.length + 4 + dims * 8
}

describe("GGUF header", () => {
  it.effect("the generated models pass, with their architecture, counts and data within the file", () =>
    Effect.sync(() => {
      const bytes = Fs.readFileSync(ensureModel("tiny"))
      const header = readBuffer(bytes, 4096)
      assert.isTrue(Either.isRight(header), reasonOf(header))
      if (Either.isLeft(header)) return
      assert.strictEqual(header.right.architecture, "llama")
      assert.strictEqual(header.right.version, 3)
      assert.strictEqual(header.right.tensorCount, 2 + 2 * 9 + 1)
      assert.strictEqual(header.right.dataEnd, bytes.length)
    }))

  it.scoped("the scalar metadata, the parameter count and the elements per tensor type are read; arrays are left out", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const bytes = smallGguf(dir, {
        architecture: "llama",
        extra: [
          ["general.license", { type: "string", value: "apache-2.0" }],
          ["general.file_type", { type: "u32", value: 1 }],
          ["llama.context_length", { type: "u32", value: 4096 }],
          ["llama.rope.freq_base", { type: "f32", value: 10000 }]
        ]
      })
      const header = readBuffer(bytes, 64)
      assert.isTrue(Either.isRight(header), reasonOf(header))
      if (Either.isLeft(header)) return
      assert.deepStrictEqual(Object.fromEntries(header.right.metadata), {
        "general.architecture": "llama",
        "general.name": "t",
        "general.license": "apache-2.0",
        "general.file_type": 1,
        "llama.context_length": 4096,
        "llama.rope.freq_base": 10000
      })
      assert.strictEqual(header.right.parameterCount, 8 * 2 + 4)
      assert.deepStrictEqual(Object.fromEntries(header.right.elementsByType), { F32: 16, F16: 4 })
      const qwen = readBuffer(Fs.readFileSync(ensureModel("qwen-chat")))
      if (Either.isLeft(qwen)) return assert.fail(qwen.left.reason)
      assert.strictEqual(qwen.right.metadata.get("qwen3.context_length"), 40960)
      assert.include(String(qwen.right.metadata.get("tokenizer.chat_template")), "<|im_start|>")
    }))

  it.prop(
    "a file cut anywhere before the end of its tensor data is refused, never thrown",
    [fc.double({ min: 0, max: 1, noNaN: true, maxExcluded: true })],
    ([fraction]) => {
      const bytes = Fs.readFileSync(ensureModel("tiny"))
      const cut = Math.floor(fraction * bytes.length)
      const header = readBuffer(bytes.subarray(0, cut), 4096)
      assert.isTrue(Either.isLeft(header), `cut at ${cut} of ${bytes.length} was accepted`)
    },
    { fastCheck: { numRuns: 200 } }
  )

  it.scoped("a wrong magic or version, a missing architecture, an unknown tensor type, a table past the end are named", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const good = smallGguf(dir, { architecture: "llama" })
      assert.strictEqual(reasonOf(readBuffer(good)), "accepted")

      const magic = Buffer.from(good)
      magic.write("GGML", 0, "latin1")
      assert.include(reasonOf(readBuffer(magic)), "no GGUF magic")

      const version = Buffer.from(good)
      version.writeUInt32LE(1, 4)
      assert.strictEqual(reasonOf(readBuffer(version)), "unsupported GGUF version 1")

      assert.strictEqual(reasonOf(readBuffer(smallGguf(dir))), "no general.architecture")

      const unknownType = Buffer.from(good)
      unknownType.writeUInt32LE(4, tensorTypeOffset(unknownType, "b.weight", 1))
      assert.strictEqual(reasonOf(readBuffer(unknownType)), `tensor "b.weight" has unknown type 4`)

      const pastTheEnd = good.subarray(0, good.length - 25) // the last tensor is 8 bytes, then 24 of padding
      assert.match(reasonOf(readBuffer(pastTheEnd)), /^tensor "b\.weight" \(8 bytes at \d+\) ends at \d+, past the end of the file/)

      const hugeCount = Buffer.from(good)
      hugeCount.writeBigUInt64LE(1n << 40n, 8)
      assert.include(reasonOf(readBuffer(hugeCount)), "tensors cannot fit in the file")
    }))

  it.scoped("the store refuses to activate a GGUF artifact whose header is broken; nothing is journaled", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const key = makeKey()
      const store = yield* makeStore(Path.join(dir, "store"), [key])
      const good = smallGguf(dir, { architecture: "llama" })
      const cut = good.subarray(0, good.length - 25)
      const manifestFor = (name: string, bytes: Buffer) =>
        new Manifest({
          name,
          role: "generation",
          revision: 1,
          artifacts: [new Artifact({ digest: sha256(bytes), size: bytes.length, mediaType: ggufMediaType })]
        })
      for (const bytes of [good, cut]) yield* store.stage(Stream.make(bytes), sha256(bytes), bytes.length)
      const refused = yield* Effect.flip(store.activate(envelope(key, manifestFor("cut", cut))))
      assert.strictEqual(refused._tag, "InvalidModelFile")
      assert.include(refused.message, sha256(cut))
      assert.include(refused.message, "past the end of the file")
      assert.isFalse(Fs.existsSync(Path.join(store.root, "journal.jsonl")))
      const activated = yield* store.activate(envelope(key, manifestFor("good", good)))
      assert.strictEqual(activated.model, "good")
    }))
})
