/**
 * Damaged state files with a real engine child: each way a state file can be wrong (missing,
 * truncated, tampered, from another model, from another node-llama-cpp version, for another
 * context size, under a version-1 sidecar) is refused for that file only: it is moved aside with a
 * warning naming why, and the turn recomputes the history from the conversation's tokens (memory,
 * or the sidecar), with greedy output equal to a cold run. The conversation is not bricked: its
 * next eviction saves it afresh and the turn after restores it. Also: records dropped from memory
 * are verified from their sidecars; restarts with another model's files and another context size;
 * and the engine child SIGKILLed while it saves.
 */
import { assert, describe, it, layer } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { ensureModel, pinnedDigests } from "../../fixtures/models.js"
import type { ChatMessage, Checkpoint } from "../../src/domain/Inference.js"
import * as Runtime from "../../src/layers/Runtime.js"
import { Conversations } from "../../src/services/Conversations.js"
import { NativeWorker } from "../../src/services/NativeWorker.js"
import { Provider } from "../../src/services/Provider.js"
import * as Scheduler from "../../src/services/Scheduler.js"
import { runtimeLayer, testChild } from "../support/engine.js"
import { collect, done, filesOf, named, tempDir, turnEqualToCold, withWarnings } from "./support.js"

type Files = ReturnType<typeof filesOf>

const editSidecar = (files: Files, edit: (sidecar: Record<string, unknown>) => Record<string, unknown>) =>
  Fs.writeFileSync(files.sidecar, JSON.stringify(edit(JSON.parse(Fs.readFileSync(files.sidecar, "utf8")))))

const editBinding = (files: Files, field: string, value: unknown) =>
  editSidecar(files, (s) => ({ ...s, state: { ...(s.state as Record<string, unknown>), [field]: value } }))

const damages: ReadonlyArray<readonly [label: string, reason: string, damage: (files: Files) => void]> = [
  ["missing", "missing", (f) => Fs.rmSync(f.state)],
  ["truncated", "size", (f) => Fs.truncateSync(f.state, Math.floor(Fs.statSync(f.state).size / 2))],
  ["tampered", "sha256", (f) => {
    const bytes = Fs.readFileSync(f.state)
    bytes[Math.floor(bytes.length / 2)] ^= 0x01
    Fs.writeFileSync(f.state, bytes)
  }],
  ["from another model", "model", (f) => editSidecar(f, (s) => ({ ...s, modelDigest: pinnedDigests.decision.slice(7) }))],
  ["from another node-llama-cpp version", "engine-version", (f) => editBinding(f, "nodeLlamaCppVersion", "3.0.0")],
  ["saved on another backend (CUDA, restored on the CPU)", "backend", (f) => editBinding(f, "backend", "cuda")],
  ["for another context size", "context-size", (f) => editBinding(f, "contextSize", 2048)],
  ["under a version-1 sidecar", "record-version", (f) =>
    editSidecar(f, (s) => ({
      version: 1,
      conversation: s.conversation,
      modelDigest: s.modelDigest,
      tokens: s.tokens,
      hash: s.hash,
      stateSha256: (s.state as { sha256: string }).sha256
    }))]
]

/** A first turn of `conversation`, then another conversation takes the only slot (which saves it). */
const savedAfterOneTurn = (directory: string, conversation: string) =>
  Effect.gen(function*() {
    const user: ChatMessage = { role: "user", content: `the log of ${conversation}` }
    const first = done(yield* collect({ messages: [user], conversation, maxTokens: 4 })).checkpoint!
    const evict = collect({ messages: [{ role: "user", content: "another voyage" }], conversation: `${conversation}/other`, maxTokens: 2 })
    yield* evict
    const files = filesOf(directory, conversation)
    assert.isTrue(Fs.existsSync(files.state), "the eviction saved a state file")
    const next = (checkpoint: Checkpoint, said: string) => ({
      messages: [user, { role: "assistant" as const, content: said }, { role: "user" as const, content: "go on" }],
      conversation,
      checkpoint,
      maxTokens: 4
    })
    return { first, files, evict, next }
  })

describe("damaged state files, the record in memory", () => {
  const directory = tempDir()
  layer(runtimeLayer({ conversationsDirectory: directory, scheduler: { slots: 1 } }), { timeout: 240_000, excludeTestServices: true })(
    "one slot",
    (it) => {
      for (const [label, reason, damage] of damages) {
        it.effect(`${label}: refused (${reason}) and moved aside; the turn recomputes, equal to a cold run; the next save restores`, () =>
          Effect.gen(function*() {
            const conversation = `damaged-${reason}`
            const saved = yield* savedAfterOneTurn(directory, conversation)
            damage(saved.files)
            const { result: second, warnings } = yield* withWarnings(turnEqualToCold(saved.next(saved.first, "x")))
            assert.include(["cold", "prefix"], second.usage.reuse)
            assert.isTrue(warnings.some((w) => w.includes(`(${reason}:`) && w.includes(conversation)), warnings.join("\n"))
            const movedAside = (path: string) => named(saved.files.dir, `${Path.basename(path)}.bad-${reason}-`)
            if (reason !== "missing") assert.lengthOf(movedAside(saved.files.state), 1)
            if (reason === "model") assert.lengthOf(movedAside(saved.files.sidecar), 1)
            // Not bricked: evicted again, it is saved afresh, and its next turn restores it.
            yield* saved.evict
            // (Its output is not compared with a cold run: a restored history was decoded one token
            // per step, and greedy choices at near-ties can differ from a cold prefill's.)
            const third = done(yield* collect(saved.next(second.checkpoint!, "y")))
            assert.strictEqual(third.usage.reuse, "restored")
            assert.strictEqual(third.usage.reusedTokens, second.checkpoint!.tokens - 1)
          }))
      }
    }
  )
})

describe("records dropped from memory", () => {
  const directory = tempDir()
  layer(
    runtimeLayer({ conversationsDirectory: directory, scheduler: { slots: 1 }, conversations: { maxHeldConversations: 1 } }),
    { timeout: 240_000, excludeTestServices: true }
  )("one slot, one record in memory", (it) => {
    it.effect("a conversation dropped from memory is verified from its sidecar and restored", () =>
      Effect.gen(function*() {
        const saved = yield* savedAfterOneTurn(directory, "dropped")
        assert.isUndefined((yield* Conversations).held("dropped"))
        const second = done(yield* collect(saved.next(saved.first, "x")))
        assert.strictEqual(second.usage.reuse, "restored")
        assert.strictEqual(second.usage.reusedTokens, saved.first.tokens - 1)
      }))

    it.effect("a tampered state file is recomputed from the sidecar's tokens", () =>
      Effect.gen(function*() {
        const saved = yield* savedAfterOneTurn(directory, "dropped-tampered")
        assert.isUndefined((yield* Conversations).held("dropped-tampered"))
        damages.find(([, reason]) => reason === "sha256")![2](saved.files)
        const { result: second, warnings } = yield* withWarnings(turnEqualToCold(saved.next(saved.first, "x")))
        assert.include(["cold", "prefix"], second.usage.reuse)
        assert.isTrue(warnings.some((w) => w.includes("(sha256:")), warnings.join("\n"))
      }))

    it.effect("with nothing in memory, a sidecar that proves nothing is InvalidCheckpoint with the reason, moved aside, never a crash", () =>
      Effect.gen(function*() {
        const cases: ReadonlyArray<readonly [string, (files: Files) => void, RegExp]> = [
          ["model", damages.find(([, r]) => r === "model")![2], new RegExp(`model: it was made by model ${pinnedDigests.decision.slice(7)}`)],
          ["malformed", (f) => Fs.writeFileSync(f.sidecar, "{\"version\": 2, \"tokens\": [1, 2"), /record-malformed/],
          ["forged tokens", (f) => editSidecar(f, (s) => ({ ...s, tokens: (s.tokens as Array<number>).map((t) => t + 1) })), /record-hash/],
          ["symlink", (f) => {
            Fs.rmSync(f.sidecar)
            Fs.symlinkSync("/etc/passwd", f.sidecar)
          }, /not-a-file: its sidecar is a symlink/],
          ["unknown", (f) => {
            Fs.rmSync(f.sidecar)
            Fs.rmSync(f.state)
          }, /nothing is held for this conversation/]
        ]
        for (const [label, damage, expected] of cases) {
          const conversation = `refused-${label}`
          const saved = yield* savedAfterOneTurn(directory, conversation)
          damage(saved.files)
          const error = yield* Effect.flip(collect(saved.next(saved.first, "x")))
          assert.strictEqual(error._tag, "InvalidCheckpoint", label)
          assert.match(error.message, expected, label)
          assert.isFalse(Fs.existsSync(saved.files.sidecar), `${label}: the sidecar is gone or moved aside`)
          // The conversation id itself still works: a turn without a checkpoint starts it afresh.
          const fresh = done(yield* collect({ messages: [{ role: "user", content: "start over" }], conversation, maxTokens: 2 }))
          assert.strictEqual(fresh.checkpoint?.conversation, conversation)
        }
      }))
  })
})

/** Runs `self` on a freshly built runtime, stopped gracefully (saving what its slots hold) afterwards. */
const withRuntime = <A, E, ER>(
  runtime: Layer.Layer<Provider | Conversations | NativeWorker | Scheduler.Scheduler, ER>,
  self: Effect.Effect<A, E, Provider | Conversations | NativeWorker | Scheduler.Scheduler>
) => Effect.scoped(Effect.flatMap(Layer.build(runtime), (context) => Effect.provide(self, context)))

it.effect("restarts: another model's files are refused by its digest; another context size recomputes", () =>
  Effect.gen(function*() {
    const directory = tempDir()
    const options = (contextSize: number) => ({
      conversationsDirectory: directory,
      admission: { contextCap: { generation: contextSize, decision: 1024 }, workspaceReservationBytes: 64 * 1024 * 1024 }
    })
    const user = (conversation: string): ChatMessage => ({ role: "user", content: `the log of ${conversation}` })
    const first = (conversation: string) =>
      Effect.map(collect({ messages: [user(conversation)], conversation, maxTokens: 4 }), (chunks) => done(chunks).checkpoint!)
    const next = (conversation: string, checkpoint: Checkpoint) => ({
      messages: [user(conversation), { role: "assistant" as const, content: "x" }, { role: "user" as const, content: "go on" }],
      conversation,
      checkpoint,
      maxTokens: 4
    })
    const tiny = pinnedDigests.tiny.slice(7)
    const decision = pinnedDigests.decision.slice(7)
    // tiny in a 4096-token context; the graceful stop saves the conversation.
    const resized = yield* withRuntime(runtimeLayer(options(4096)), first("resized"))
    // The decision model (same shapes as tiny: its state file would load) as the generation model.
    const decisionRuntime = Layer.fresh(Runtime.layerWithModels({ generation: ensureModel("decision"), decision: ensureModel("decision") }, {
      ...options(4096),
      worker: { child: testChild, prefillChunk: 128, stopTimeout: Duration.seconds(3) }
    }))
    const crossed = yield* withRuntime(decisionRuntime, first("crossed"))
    // Its files, planted where tiny's conversation "crossed" would have them.
    const from = filesOf(directory, "crossed", decision)
    const to = filesOf(directory, "crossed", tiny)
    Fs.copyFileSync(from.sidecar, to.sidecar)
    Fs.copyFileSync(from.state, to.state)
    // tiny again, in a 2048-token context.
    yield* withRuntime(runtimeLayer(options(2048)), Effect.gen(function*() {
      const { result: second, warnings } = yield* withWarnings(turnEqualToCold(next("resized", resized)))
      assert.include(["cold", "prefix"], second.usage.reuse)
      assert.isTrue(warnings.some((w) => w.includes("(context-size: it was saved from a context of 4096 tokens, this one has 2048)")), warnings.join("\n"))
      const files = filesOf(directory, "resized", tiny)
      assert.lengthOf(named(files.dir, `${Path.basename(files.state)}.bad-context-size-`), 1)
      const refused = yield* Effect.flip(collect(next("crossed", crossed)))
      assert.strictEqual(refused._tag, "InvalidCheckpoint")
      assert.include(refused.message, `it was made by model ${decision}, not ${tiny}`)
      assert.lengthOf(named(to.dir, `${Path.basename(to.state)}.bad-model-`), 1)
      assert.lengthOf(named(to.dir, `${Path.basename(to.sidecar)}.bad-model-`), 1)
    }))
  }), { timeout: 180_000 })
