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
import { collect, doneOf as done, probabilitiesOf, tokensOf } from "../support/generation.js"

export const tempDir = () => Fs.mkdtempSync(Path.join(Os.tmpdir(), "nativegen-state-files-"))

export { collect, done, tokensOf }

/** Greedy output of `prompt` with nothing reused, and each token's probability. */
export interface ColdRun {
  readonly tokens: ReadonlyArray<number>
  readonly probabilities: ReadonlyArray<number>
}

/** Greedy output of `prompt` with nothing reused, on the anonymous sequence (first filled with an unrelated prompt). */
export const cold = (prompt: ReadonlyArray<number>, maxTokens: number) =>
  Effect.gen(function*() {
    const worker = yield* NativeWorker
    // The last sequence is an anonymous one (after the conversation slots).
    const sequence = (yield* (yield* Scheduler.Scheduler).status).slots - 1
    const other = prompt[0] === 40 ? 41 : 40
    yield* Stream.runDrain(worker.generate({ prompt: [other, 42], maxTokens: 1, sampling: { temperature: 0 }, sequence }))
    const events = Chunk.toArray(yield* Stream.runCollect(
      worker.generate({ prompt, maxTokens, sampling: { temperature: 0 }, sequence, confidence: true })
    ))
    const started = events.find((e) => e._tag === "Started")
    assert.strictEqual(started?._tag === "Started" ? started.reusedTokens : -1, 0, "the cold run reused nothing")
    const tokens = events.flatMap((e) => (e._tag === "Token" ? [e] : []))
    return { tokens: tokens.map((t) => t.token), probabilities: tokens.map((t) => t.confidence!) } satisfies ColdRun
  })

/**
 * Greedy parity of a turn whose held history was decoded one token per step with a cold run that
 * prefills it in chunks: the batches differ, so probabilities agree only closely (engine-notes.md:
 * batch splits), within 1e-3. The outputs are equal up to the first near tie, where the two runs
 * may pick different tokens of nearly equal probability (each within 1e-3 of the other's); after
 * it their contexts differ and nothing more is compared.
 */
export const assertCloseParity = (turn: ColdRun, reference: ColdRun, label: string) => {
  assert.strictEqual(turn.tokens.length, reference.tokens.length, `${label}: token count`)
  assert.strictEqual(turn.probabilities.length, reference.probabilities.length, `${label}: probability count`)
  const split = turn.tokens.findIndex((token, i) => token !== reference.tokens[i])
  const compared = split === -1 ? turn.tokens.length : split + 1
  const diff = Math.max(0, ...turn.probabilities.slice(0, compared).map((p, i) => Math.abs(p - reference.probabilities[i]!)))
  assert.isAtMost(diff, 1e-3, `${label}: probability difference ${diff} (tokens ${turn.tokens} vs cold ${reference.tokens})`)
}

/** Runs a turn and checks that its greedy output equals a cold run of its exact prompt (up to a near tie). */
export const turnEqualToCold = (request: GenerateRequest) =>
  Effect.gen(function*() {
    const chunks = yield* collect({ ...request, probabilities: true })
    const d = done(chunks)
    const conversation = request.conversation ?? request.checkpoint!.conversation
    const held = (yield* Conversations).held(conversation)!
    const prompt = held.slice(0, held.length - d.usage.generatedTokens)
    assert.strictEqual(prompt.length, d.usage.promptTokens)
    const reference = yield* cold(prompt, request.maxTokens ?? assert.fail("the cold run needs the turn's maxTokens"))
    const turn = { tokens: tokensOf(chunks), probabilities: probabilitiesOf(chunks) }
    assertCloseParity(turn, reference, `reuse ${d.usage.reuse} (${d.usage.reusedTokens} reused of ${d.usage.promptTokens})`)
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
