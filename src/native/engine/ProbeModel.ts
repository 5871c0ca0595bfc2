/**
 * The backend probe's model: a tiny llama-architecture GGUF (one block, 64-wide, a 260-token
 * byte vocabulary) written on demand, so a probe can run a real decode step on a backend without
 * any model of the user's. Its weights are constant: the probe checks that the backend's kernels
 * run, not what they compute. Child code (imports nothing native).
 */
import * as Fs from "node:fs"

const EMBEDDING = 64
const FEED_FORWARD = 128
const HEADS = 4

type Value =
  | { readonly type: "u32"; readonly value: number }
  | { readonly type: "f32"; readonly value: number }
  | { readonly type: "bool"; readonly value: boolean }
  | { readonly type: "string"; readonly value: string }
  | { readonly type: "string[]"; readonly value: ReadonlyArray<string> }
  | { readonly type: "f32[]"; readonly value: ReadonlyArray<number> }
  | { readonly type: "i32[]"; readonly value: ReadonlyArray<number> }

const typeId = { u32: 4, i32: 5, f32: 6, bool: 7, string: 8, array: 9 } as const

/** Little-endian bytes, appended. */
const writer = () => {
  const parts: Array<Buffer> = []
  let length = 0
  const push = (b: Buffer) => {
    parts.push(b)
    length += b.length
  }
  const u32 = (v: number) => {
    const b = Buffer.alloc(4)
    b.writeUInt32LE(v)
    push(b)
  }
  const i32 = (v: number) => {
    const b = Buffer.alloc(4)
    b.writeInt32LE(v)
    push(b)
  }
  const u64 = (v: number) => {
    const b = Buffer.alloc(8)
    b.writeBigUInt64LE(BigInt(v))
    push(b)
  }
  const f32 = (v: number) => {
    const b = Buffer.alloc(4)
    b.writeFloatLE(v)
    push(b)
  }
  const string = (s: string) => {
    const b = Buffer.from(s, "utf8")
    u64(b.length)
    push(b)
  }
  const value = (v: Value) => {
    switch (v.type) {
      case "u32":
        u32(typeId.u32)
        return u32(v.value)
      case "f32":
        u32(typeId.f32)
        return f32(v.value)
      case "bool":
        u32(typeId.bool)
        return push(Buffer.from([v.value ? 1 : 0]))
      case "string":
        u32(typeId.string)
        return string(v.value)
      case "string[]":
        u32(typeId.array)
        u32(typeId.string)
        u64(v.value.length)
        return v.value.forEach(string)
      case "f32[]":
        u32(typeId.array)
        u32(typeId.f32)
        u64(v.value.length)
        return v.value.forEach(f32)
      case "i32[]":
        u32(typeId.array)
        u32(typeId.i32)
        u64(v.value.length)
        return v.value.forEach(i32)
    }
  }
  const pad = (alignment: number) => {
    const rest = length % alignment
    if (rest !== 0) push(Buffer.alloc(alignment - rest))
  }
  return { u32, u64, string, value, pad, push, bytes: () => Buffer.concat(parts), get length() { return length } }
}

/** The vocabulary: unknown, BOS, EOS, the 256 byte tokens and the word-start marker. */
const vocabulary = () => {
  const tokens = ["<unk>", "<s>", "</s>"]
  const types = [2, 3, 3]
  for (let b = 0; b < 256; b++) {
    tokens.push(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`)
    types.push(6)
  }
  tokens.push("\u2581")
  types.push(1)
  return { tokens, types, scores: tokens.map(() => 0) }
}

/** The probe model's bytes (about 300 KB). */
export const probeModelBytes = (): Buffer => {
  const vocab = vocabulary()
  const n = vocab.tokens.length
  const tensors: ReadonlyArray<readonly [string, ReadonlyArray<number>, number]> = [
    ["token_embd.weight", [EMBEDDING, n], 0.02],
    ["output_norm.weight", [EMBEDDING], 1],
    ["output.weight", [EMBEDDING, n], 0.02],
    ["blk.0.attn_norm.weight", [EMBEDDING], 1],
    ["blk.0.attn_q.weight", [EMBEDDING, EMBEDDING], 0.02],
    ["blk.0.attn_k.weight", [EMBEDDING, EMBEDDING], 0.02],
    ["blk.0.attn_v.weight", [EMBEDDING, EMBEDDING], 0.02],
    ["blk.0.attn_output.weight", [EMBEDDING, EMBEDDING], 0.02],
    ["blk.0.ffn_norm.weight", [EMBEDDING], 1],
    ["blk.0.ffn_gate.weight", [EMBEDDING, FEED_FORWARD], 0.02],
    ["blk.0.ffn_up.weight", [EMBEDDING, FEED_FORWARD], 0.02],
    ["blk.0.ffn_down.weight", [FEED_FORWARD, EMBEDDING], 0.02]
  ]
  const metadata: ReadonlyArray<readonly [string, Value]> = [
    ["general.architecture", { type: "string", value: "llama" }],
    ["general.name", { type: "string", value: "nativegen-backend-probe" }],
    ["general.alignment", { type: "u32", value: 32 }],
    ["general.file_type", { type: "u32", value: 0 }],
    ["llama.context_length", { type: "u32", value: 256 }],
    ["llama.embedding_length", { type: "u32", value: EMBEDDING }],
    ["llama.block_count", { type: "u32", value: 1 }],
    ["llama.feed_forward_length", { type: "u32", value: FEED_FORWARD }],
    ["llama.attention.head_count", { type: "u32", value: HEADS }],
    ["llama.attention.head_count_kv", { type: "u32", value: HEADS }],
    ["llama.attention.layer_norm_rms_epsilon", { type: "f32", value: 1e-5 }],
    ["llama.rope.dimension_count", { type: "u32", value: EMBEDDING / HEADS }],
    ["llama.vocab_size", { type: "u32", value: n }],
    ["tokenizer.ggml.model", { type: "string", value: "llama" }],
    ["tokenizer.ggml.tokens", { type: "string[]", value: vocab.tokens }],
    ["tokenizer.ggml.scores", { type: "f32[]", value: vocab.scores }],
    ["tokenizer.ggml.token_type", { type: "i32[]", value: vocab.types }],
    ["tokenizer.ggml.bos_token_id", { type: "u32", value: 1 }],
    ["tokenizer.ggml.eos_token_id", { type: "u32", value: 2 }],
    ["tokenizer.ggml.unknown_token_id", { type: "u32", value: 0 }],
    ["tokenizer.ggml.add_bos_token", { type: "bool", value: true }]
  ]
  const w = writer()
  w.u32(0x46554747)
  w.u32(3)
  w.u64(tensors.length)
  w.u64(metadata.length)
  for (const [key, value] of metadata) {
    w.string(key)
    w.value(value)
  }
  let offset = 0
  const sizes = tensors.map(([, dims]) => dims.reduce((a, b) => a * b, 1) * 4)
  tensors.forEach(([name, dims], i) => {
    w.string(name)
    w.u32(dims.length)
    dims.forEach((d) => w.u64(d))
    w.u32(0) // f32
    w.u64(offset)
    offset += Math.ceil(sizes[i]! / 32) * 32
  })
  w.pad(32)
  tensors.forEach(([, , value], i) => {
    const data = Buffer.alloc(Math.ceil(sizes[i]! / 32) * 32)
    for (let at = 0; at < sizes[i]!; at += 4) data.writeFloatLE(value, at)
    w.push(data)
  })
  return w.bytes()
}

/** Writes the probe model to `path` (created or replaced). */
export const writeProbeModel = (path: string): void => Fs.writeFileSync(path, probeModelBytes())
