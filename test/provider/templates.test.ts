/**
 * A model's own chat template that fails is the request's typed TemplateError (naming the model
 * and the template's message), never a defect, and the engine child stays up. The generation
 * model here is tiny with a template of the kind real models ship: it raises on a system message
 * (`raise_exception`) and reads a field a tool message does not have.
 */
import { afterAll, assert, describe, layer } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { generateModel, modelSpecs } from "../../fixtures/models.js"
import { NativeWorker } from "../../src/services/NativeWorker.js"
import { Provider } from "../../src/services/Provider.js"
import { ProviderError } from "../../src/services/ProviderError.js"
import { runtimeLayer } from "../support/engine.js"

const raisingTemplate =
  "{% for message in messages %}" +
  "{% if message['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}" +
  "{% if message['role'] == 'tool' %}{{ '<|im_start|>tool ' + message['tool_call_id'].upper() + '\\n' }}" +
  "{% else %}{{ '<|im_start|>' + message['role'] + '\\n' }}{% endif %}" +
  "{{ message['content'] + '<|im_end|>' + '\\n' }}" +
  "{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

const directory = Fs.mkdtempSync(Path.join(Os.tmpdir(), "nativegen-template-"))
const modelPath = Path.join(directory, "raising.gguf")
generateModel(modelSpecs.tiny, modelPath, { chatTemplate: raisingTemplate })
afterAll(() => Fs.rmSync(directory, { recursive: true, force: true }))

/** The failure of `effect`, checked to be a typed failure and not a defect. */
const typedFailure = <A, E>(effect: Effect.Effect<A, E>) =>
  Effect.flatMap(Effect.exit(effect), (exit) => {
    assert(Exit.isFailure(exit), "expected a failure")
    assert.isFalse(Cause.isDie(exit.cause), `a defect: ${Cause.pretty(exit.cause)}`)
    return Effect.succeed(Cause.squash(exit.cause) as E)
  })

describe("chat templates that fail", () => {
  layer(runtimeLayer({}, { generation: modelPath }), { timeout: 120_000, excludeTestServices: true })("raising template", (it) => {
    it.effect("raise_exception and a missing field are TemplateErrors naming the model and the message; the child stays up", () =>
      Effect.gen(function*() {
        const provider = yield* Provider
        const worker = yield* NativeWorker
        const before = yield* worker.readiness

        const raised = yield* typedFailure(Stream.runDrain(provider.generate({
          messages: [{ role: "system", content: "be brief" }, { role: "user", content: "hi" }],
          maxTokens: 4
        })))
        assert(raised._tag === "TemplateError", `expected TemplateError, got ${raised._tag}`)
        assert.strictEqual(raised.modelPath, modelPath)
        assert.strictEqual(raised.role, "generation")
        assert.strictEqual(raised.reason, "System role not supported")
        assert.include(raised.message, modelPath)

        const missing = yield* typedFailure(provider.count({
          messages: [{ role: "user", content: "the weather?" }, { role: "tool", content: "sunny" }]
        }))
        assert(missing._tag === "TemplateError", `expected TemplateError, got ${missing._tag}`)
        assert.include(missing.reason, "UndefinedValue")

        // It crosses the RPC boundary as itself.
        const wire = Schema.encodeSync(ProviderError)(raised)
        assert.deepStrictEqual(Schema.decodeUnknownSync(ProviderError)(wire), raised)

        // The same child serves the next request.
        const chunks = Chunk.toArray(yield* Stream.runCollect(provider.generate({
          messages: [{ role: "user", content: "hi" }],
          maxTokens: 3
        })))
        const done = chunks.at(-1)
        assert(done?._tag === "Done")
        assert.strictEqual(done.usage.generatedTokens, 3)
        const after = yield* worker.readiness
        assert.deepStrictEqual([after.state, after.pid, after.incarnation], ["ready", before.pid, before.incarnation])
      }))
  })
})
