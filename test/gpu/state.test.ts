/**
 * Conversations on the GPU (`npm run test:gpu`): a turn reusing the held prefix and a turn
 * restored from a state file give the same greedy output as a cold run of their prompt; a state
 * file saved on CUDA is refused on the CPU backend (reason `backend`), moved aside, and the turn
 * is recomputed from the sidecar's tokens.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { ensureModel } from "../../fixtures/models.js"
import type { ChatMessage, Checkpoint, GenerateRequest } from "../../src/domain/Inference.js"
import type { Backend } from "../../src/native/Protocol.js"
import { Conversations } from "../../src/services/Conversations.js"
import { NativeWorker } from "../../src/services/NativeWorker.js"
import { Provider } from "../../src/services/Provider.js"
import * as Scheduler from "../../src/services/Scheduler.js"
import { cold, collect, done, filesOf, named, tempDir, withWarnings } from "../conversations/support.js"
import { runtimeLayer, testChild } from "../support/engine.js"
import { gpuBackend, noGpu, skipMessage } from "./support.js"

skipMessage("state")

const runtimeOn = (backend: Backend, directory: string) =>
  runtimeLayer(
    { conversationsDirectory: directory, scheduler: { slots: 1 }, worker: { child: { ...testChild, backend } } },
    { generation: ensureModel("qwen-chat"), decision: ensureModel("qwen-decision") }
  )

/** `use` inside a runtime on `backend` (stopped afterwards). */
const inRuntime = <A, E>(
  backend: Backend,
  directory: string,
  use: Effect.Effect<A, E, Provider | Conversations | NativeWorker | Scheduler.Scheduler>
) =>
  Effect.scoped(Effect.flatMap(Layer.build(runtimeOn(backend, directory)), (context) =>
    Effect.provide(use, Context.pick(Provider, Conversations, NativeWorker, Scheduler.Scheduler)(context))))

/**
 * Runs a turn and checks that the tokens it generated (channel markers included: the scripted
 * reply opens with `<think>`, which no Text chunk carries) equal a cold run of its exact prompt.
 */
const turnEqualToCold = (request: GenerateRequest) =>
  Effect.gen(function*() {
    const d = done(yield* collect(request))
    const held = (yield* Conversations).held(request.conversation!)!
    const prompt = held.slice(0, held.length - d.usage.generatedTokens)
    assert.strictEqual(prompt.length, d.usage.promptTokens)
    assert.deepStrictEqual(held.slice(prompt.length), (yield* cold(prompt, request.maxTokens!)).tokens, `reuse ${d.usage.reuse} (${d.usage.reusedTokens} reused of ${d.usage.promptTokens})`)
    return d
  })

const user: ChatMessage = { role: "user", content: "the log of the voyage on the GPU" }
const next = (checkpoint: Checkpoint, conversation: string, said: string) => ({
  messages: [user, { role: "assistant" as const, content: said }, { role: "user" as const, content: "go on" }],
  conversation,
  checkpoint,
  maxTokens: 6
})

describe.skipIf(noGpu !== undefined)(`conversations on ${gpuBackend}`, () => {
  it.live(`reuse and restore on ${gpuBackend} equal a cold run; its state file is refused (backend) on the CPU and the turn recomputed`, () =>
    Effect.gen(function*() {
      const directory = tempDir()
      const conversation = "gpu-voyage"
      const saved = yield* inRuntime(gpuBackend, directory, Effect.gen(function*() {
        const first = done(yield* collect({ messages: [user], conversation, maxTokens: 6 }))
        // Reuse: the held prefix, on the same sequence.
        const second = yield* turnEqualToCold(next(first.checkpoint!, conversation, "a"))
        assert.include(["prefix", "continuation"], second.usage.reuse)
        // Another conversation takes the only slot: this one is saved to its state file.
        yield* collect({ messages: [{ role: "user", content: "another voyage" }], conversation: `${conversation}/other`, maxTokens: 2 })
        assert.isTrue(Fs.existsSync(filesOf(directory, conversation).state), "the eviction saved a state file")
        // Restore: the state file back into the slot, then the turn.
        const third = yield* turnEqualToCold(next(second.checkpoint!, conversation, "b"))
        assert.strictEqual(third.usage.reuse, "restored")
        // Saved again for the CPU side.
        yield* collect({ messages: [{ role: "user", content: "a third voyage" }], conversation: `${conversation}/third`, maxTokens: 2 })
        return third.checkpoint!
      }))
      const files = filesOf(directory, conversation)
      const sidecar = JSON.parse(Fs.readFileSync(files.sidecar, "utf8")) as { state: { backend?: string } }
      assert.strictEqual(sidecar.state.backend, gpuBackend)
      yield* inRuntime("cpu", directory, Effect.gen(function*() {
        const { result, warnings } = yield* withWarnings(turnEqualToCold(next(saved, conversation, "c")))
        assert.include(["cold", "prefix"], result.usage.reuse)
        assert.isTrue(warnings.some((w) => w.includes("(backend:") && w.includes(gpuBackend)), warnings.join("\n"))
        assert.lengthOf(named(files.dir, `${Path.basename(files.state)}.bad-backend-`), 1)
        console.info(`test:gpu state: ${warnings.find((w) => w.includes("(backend:"))}`)
      }))
    }), 240_000)
})
