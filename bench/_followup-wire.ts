/**
 * A development tool: the CPU cost of the JavaScript stages of the peer benchmark's follow-up that
 * do not depend on the engine, measured in process as CPU time over many repetitions (so the
 * machine's load changes the figures little): the Begin payload with its 4,037-token prompt
 * through the engine protocol (Schema's effectful encode in the host, as @effect/rpc runs it, msgpack frame, Schema decode
 * in the child), with token ids as an array of numbers (before) and as one byte string (now,
 * src/domain/TokenArray.ts), side by side; the three RenderText payloads of a continuation (the
 * whole conversation's messages each); the checkpoint hash over the held tokens (verify and record);
 * the public request's validation. Run: `node --import tsx bench/_followup-wire.ts [repetitions]`.
 */
import { Template } from "@huggingface/jinja"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs"
import { readGgufFileInfo } from "node-llama-cpp"
import { ensureModel } from "../fixtures/models.js"
import { ValidGenerateRequest } from "../src/domain/RequestRules.js"
import { templateVariables } from "../src/native/engine/Templates.js"
import { engineSerialization } from "../src/native/Framing.js"
import { BeginRequest, EngineRpcs } from "../src/native/Protocol.js"
import { hashTokens } from "../src/services/conversations/TokenHash.js"
import { followUp, history } from "./peer/Prompts.js"

const N = Number(process.argv[2] ?? 200)
const cpuMs = () => {
  const u = process.cpuUsage()
  return (u.user + u.system) / 1000
}
/** CPU ms per call of `f`, over N calls after a warm-up. */
const perCall = (f: () => void) => {
  for (let i = 0; i < Math.max(10, N / 10); i++) f()
  const start = cpuMs()
  for (let i = 0; i < N; i++) f()
  return (cpuMs() - start) / N
}

const prompt = Array.from({ length: 4037 }, (_, i) => (i * 7919 + 13) % 151_936)
const request = { prompt, maxTokens: 4, sampling: { temperature: 0 }, generationId: "generate-1234abcd", prefillChunk: 128, sequence: 1, lane: "foreground" as const }
/** Begin as it was: token ids as an array of non-negative integers. */
const BeginBefore = Schema.Struct({
  ...BeginRequest.fields,
  prompt: Schema.Array(Schema.NonNegativeInt),
  stopTokens: Schema.optional(Schema.Array(Schema.NonNegativeInt))
})

/** As @effect/rpc does it: Schema's effectful encode and decode (run here with Effect.runSync). */
const roundTrip = <A, I>(schema: Schema.Schema<A, I>, value: A) => {
  const encodeEffect = Schema.encode(schema)
  const decodeEffect = Schema.decodeUnknown(schema)
  const encode = (a: A) => Effect.runSync(encodeEffect(a))
  const decode = (u: unknown) => Effect.runSync(decodeEffect(u))
  const host = engineSerialization.unsafeMake()
  const child = engineSerialization.unsafeMake()
  return () => {
    const frame = host.encode({ _tag: "Request", id: "1", tag: "Begin", payload: encode(value), headers: [] })
    const [message] = child.decode(frame as Uint8Array) as Array<{ readonly payload: unknown }>
    decode(message!.payload)
  }
}

const seed = "wire"
const turn1 = history(seed, 3800)
const messages = followUp(seed, turn1, "the of and to", 200)
const renderText = EngineRpcs.requests.get("RenderText")!.payloadSchema as unknown as Schema.Schema<unknown, unknown>
const renderPayload = { role: "generation", messages: messages.slice(0, -1), addGenerationPrompt: false }
const held = prompt.slice(0, 3830)
const validate = Schema.decodeUnknownSync(ValidGenerateRequest)
const publicRequest = { messages, conversation: "c", maxTokens: 4, sampling: { temperature: 0 } }

const rows: Array<[string, number]> = []
for (let round = 0; round < 2; round++) {
  rows.push(["Begin payload, ids as an array (before): encode, frame, decode", perCall(roundTrip(BeginBefore, request))])
  rows.push(["Begin payload, ids as bytes (now): encode, frame, decode", perCall(roundTrip(BeginRequest, request))])
}
rows.push(["RenderText payload x3 (whole conversation each): encode, frame, decode", 3 * perCall(roundTrip(renderText, renderPayload))])
const info = await readGgufFileInfo(ensureModel("qwen-bench"))
const template = new Template(info.metadata.tokenizer?.chat_template as string)
rows.push(["Qwen3 template render x3 (the continuation's assistant prompt, history, full chat)", perCall(() => {
  template.render(templateVariables(messages.slice(0, -2), true))
  template.render(templateVariables(messages.slice(0, -1), false))
  template.render(templateVariables(messages, true))
})])
rows.push(["checkpoint hash of 3,830 held tokens (x2 per turn: verify, record)", perCall(() => hashTokens(held))])
rows.push(["sha256 of the same 15 KiB alone", perCall(() => Crypto.createHash("sha256").update(Buffer.alloc(held.length * 4)).digest("hex"))])
rows.push(["public request validation (ValidGenerateRequest)", perCall(() => validate(publicRequest))])

console.log(`CPU ms per call, ${N} calls each; load ${Fs.readFileSync("/proc/loadavg", "utf8").trim()}`)
for (const [name, ms] of rows) console.log(`| ${name} | ${ms.toFixed(3)} |`)
