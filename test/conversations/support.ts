/** Shared helpers of the conversation tests: turns through the Provider, cold reference runs, state file paths, captured warnings. */
import { assert } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as Stream from "effect/Stream"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import type { GenerateRequest } from "../../src/domain/Inference.js"
import { Conversations } from "../../src/services/Conversations.js"
import { NativeWorker } from "../../src/services/NativeWorker.js"
import * as Scheduler from "../../src/services/Scheduler.js"
import { collect, doneOf as done, tokensOf } from "../support/generation.js"

export const tempDir = () => Fs.mkdtempSync(Path.join(Os.tmpdir(), "nativegen-state-files-"))

export { collect, done, tokensOf }

/** Greedy output of `prompt` with nothing reused, on the anonymous sequence (first filled with an unrelated prompt). */
export const cold = (prompt: ReadonlyArray<number>, maxTokens: number) =>
  Effect.gen(function*() {
    const worker = yield* NativeWorker
    const sequence = (yield* (yield* Scheduler.Scheduler).status).slots - 1
    const other = prompt[0] === 40 ? 41 : 40
    yield* Stream.runDrain(worker.generate({ prompt: [other, 42], maxTokens: 1, sampling: { temperature: 0 }, sequence }))
    const events = Chunk.toArray(yield* Stream.runCollect(worker.generate({ prompt, maxTokens, sampling: { temperature: 0 }, sequence })))
    const started = events.find((e) => e._tag === "Started")
    assert.strictEqual(started?._tag === "Started" ? started.reusedTokens : -1, 0, "the cold run reused nothing")
    return events.flatMap((e) => (e._tag === "Token" ? [e.token] : []))
  })

/** Runs a turn and checks that its greedy output equals a cold run of its exact prompt. */
export const turnEqualToCold = (request: GenerateRequest) =>
  Effect.gen(function*() {
    const chunks = yield* collect(request)
    const d = done(chunks)
    const conversation = request.conversation ?? request.checkpoint!.conversation
    const held = (yield* Conversations).held(conversation)!
    const prompt = held.slice(0, held.length - d.usage.generatedTokens)
    assert.strictEqual(prompt.length, d.usage.promptTokens)
    assert.deepStrictEqual(tokensOf(chunks), yield* cold(prompt, request.maxTokens ?? assert.fail("the cold run needs the turn's maxTokens")), `reuse ${d.usage.reuse} (${d.usage.reusedTokens} reused of ${d.usage.promptTokens})`)
    return d
  })

/** The model's state file directory under `directory` (there is one model). */
export const modelDirectory = (directory: string) => {
  const [model] = Fs.readdirSync(directory)
  return Path.join(directory, model!)
}

/** A conversation's sidecar and state file paths (in the model's directory; the only one when not named). */
export const filesOf = (directory: string, conversation: string, modelDigest?: string) => {
  const name = Crypto.createHash("sha256").update(conversation).digest("hex")
  const dir = modelDigest === undefined ? modelDirectory(directory) : Path.join(directory, modelDigest)
  return { dir, sidecar: Path.join(dir, `${name}.json`), state: Path.join(dir, `${name}.state`) }
}

/** Names in a directory that start with `prefix`. */
export const named = (dir: string, prefix: string) => Fs.readdirSync(dir).filter((f) => f.startsWith(prefix))

/** Runs `self` with its warnings captured (as text, annotations included). */
export const withWarnings = <A, E, R>(self: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const warnings: Array<string> = []
    const capture = Logger.make(({ annotations, logLevel, message }) => {
      if (logLevel._tag !== "Warning") return
      const text = Array.isArray(message) ? message.join(" ") : String(message)
      warnings.push(`${text} ${JSON.stringify(Object.fromEntries(annotations))}`)
    })
    const result = yield* Effect.provide(self, Logger.add(capture))
    return { result, warnings }
  })
