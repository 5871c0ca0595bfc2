/**
 * The package's public surface (issue 13, item 6): what `import ... from "nativegen"` offers is
 * exactly the expected set (an accidental export fails here), and the runtime layers fail with
 * the small `RuntimeStartError` union, a store that cannot be read arriving as `StoreUnavailable`
 * with the store's own error as its cause and a model file the engine refuses as `NoLoadableModel`.
 */
import { assert, describe, expectTypeOf, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Fs from "node:fs"
import * as Path from "node:path"
// The sources behind the "." export (the pack test imports the built package by its name).
import * as Nativegen from "../src/index.js"
import { ensureModel } from "../fixtures/models.js"
import { testChild, testRunEnv } from "./support/engine.js"
import { tempDir } from "./store/helpers.js"

const names = (module: object) => Object.keys(module).sort()

describe("public surface", () => {
  it("the package exports the runtime, the Provider with its schemas and errors, the store, the client and the server", () => {
    assert.deepStrictEqual(
      names(Nativegen),
      [
        // the runtime
        "Runtime",
        // the Provider, its request and response schemas
        "Provider",
        "Channel",
        "ChatMessage",
        "ChatRole",
        "Checkpoint",
        "CountRequest",
        "CountResult",
        "DecideRequest",
        "DecideResult",
        "DecisionHead",
        "EngineState",
        "GenerateChunk",
        "GenerateRequest",
        "GenerationLane",
        "LabelDecision",
        "PrepareRequest",
        "PrepareResult",
        "Readiness",
        "ReuseKind",
        "Role",
        "Sampling",
        "StopReason",
        "Timings",
        "TokenizeRequest",
        "TokenizeResult",
        "ToolDefinition",
        "Usage",
        // the Provider's errors
        "ProviderError",
        "EngineFailure",
        "TemplateError",
        "EngineUnavailable",
        "GenerationFailed",
        "ContextAdmissionFailed",
        "ContextExceeded",
        "RoleNotAdmitted",
        "WorkspaceTooLarge",
        "MalformedChannel",
        "InvalidRequest",
        "QueueFull",
        "QueueTimeout",
        "InvalidCheckpoint",
        // the store, the client, the server
        "Store",
        "StoreError",
        "Client",
        "Server"
      ].sort()
    )
  })

  it("each namespace offers its layers, configuration and errors, nothing internal", () => {
    assert.deepStrictEqual(
      names(Nativegen.Runtime),
      ["layer", "layerWithModels", "StoreUnavailable", "NoLoadableModel", "ContextAdmissionFailed", "EngineStartFailed"].sort()
    )
    assert.deepStrictEqual(names(Nativegen.Store), ["Store", "StoreConfig", "make", "layer", "layerSeeded", "generateKeys"].sort())
    assert.deepStrictEqual(names(Nativegen.Client), ["RemoteStore", "ConnectError", "RemoteUnavailable", "make", "layer", "defaultReconnectTimeout"].sort())
    assert.deepStrictEqual(
      names(Nativegen.Server),
      ["layer", "config", "defaults", "defaultSocketPath", "AlreadyRunning", "ListenFailed", "SocketPathOccupied", "UnsafeSocketDirectory"].sort()
    )
  })

  it("both runtime layers fail with RuntimeStartError and nothing else", () => {
    expectTypeOf<Layer.Layer.Error<ReturnType<typeof Nativegen.Runtime.layer>>>().toEqualTypeOf<Nativegen.Runtime.RuntimeStartError>()
    expectTypeOf<Layer.Layer.Error<ReturnType<typeof Nativegen.Runtime.layerWithModels>>>()
      .toEqualTypeOf<Nativegen.Runtime.RuntimeStartError>()
  })

  it.scoped("a store whose journal is corrupt: the runtime does not start, StoreUnavailable with the journal's error as cause", () =>
    Effect.gen(function*() {
      const root = yield* tempDir
      Fs.writeFileSync(Path.join(root, "journal.jsonl"), "this is not a journal entry\n{\"neither\": \"is this\"}\n")
      const error = yield* Effect.flip(Layer.build(Nativegen.Runtime.layer({ store: { root } })))
      assert.strictEqual(error._tag, "StoreUnavailable")
      if (error._tag !== "StoreUnavailable") return
      assert.strictEqual(error.cause._tag, "JournalCorrupt")
      assert.include(error.message, "journal.jsonl")
    }))

  it.scoped("a model file the engine refuses (truncated), given by path: NoLoadableModel naming the file and the engine's reason", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const truncated = Path.join(dir, "truncated.gguf")
      const whole = Fs.readFileSync(ensureModel("tiny"))
      Fs.writeFileSync(truncated, whole.subarray(0, Math.floor(whole.length / 2)))
      const runtime = Nativegen.Runtime.layerWithModels({ generation: truncated, decision: ensureModel("decision") }, {
        worker: { child: testChild, childEnv: testRunEnv, stopTimeout: Duration.seconds(3) }
      })
      const error = yield* Effect.flip(Layer.build(runtime))
      assert.strictEqual(error._tag, "NoLoadableModel", error.message)
      if (error._tag !== "NoLoadableModel") return
      assert.strictEqual(error.role, "generation")
      assert.include(error.message, truncated)
    }), { timeout: 60_000 })
})
