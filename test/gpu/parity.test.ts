/**
 * Parity across backends on the GPU (`npm run test:gpu`): greedy output token-exact on CPU and
 * CUDA for the scripted models (their logits are not near ties: the next scripted token leads by
 * 24), and decision probabilities and ranks on a real-vocabulary model within a stated tolerance.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import { ensureModel, type ModelName } from "../../fixtures/models.js"
import type { Backend } from "../../src/native/Protocol.js"
import { gpuBackend, noGpu, skipMessage, withWorker } from "./support.js"

skipMessage("parity")

const scripted: ReadonlyArray<ModelName> = ["qwen-chat", "qwen-chat-q8_0", "qwen-chat-f32", "qwen-tool"]

const greedyOn = (backend: Backend, model: ModelName) =>
  withWorker(backend, {
    generation: { modelPath: ensureModel(model), contextSize: 2048, sequences: 1 },
    decision: { modelPath: ensureModel("qwen-decision"), contextSize: 1024 }
  }, (worker) =>
    Effect.gen(function*() {
      const prompt = yield* worker.render("generation", [{ role: "user", content: "what does the water do to the air?" }])
      const events = yield* Stream.runCollect(worker.generate({ prompt, maxTokens: 64, sampling: { temperature: 0 } }))
      return Chunk.toArray(events).flatMap((e) => (e._tag === "Token" ? [e.token] : []))
    }))

/**
 * The tolerance between backends (what the design it rebuilds measured): probabilities
 * within 0.0012 of each other. Ranks must agree wherever two labels' probabilities are further
 * apart than twice that (closer than that, the order of a near tie is the kernels' rounding).
 */
const PROBABILITY_TOLERANCE = 0.0012

const heads = [
  { name: "sentiment", labels: ["positive", "negative", "neutral"] },
  { name: "topic", labels: ["weather", "sports", "politics", "cooking", "music", "travel"] },
  { name: "answer", labels: ["yes", "no"] }
]

const scoresOn = (backend: Backend, model: ModelName) =>
  withWorker(backend, {
    generation: { modelPath: ensureModel("qwen-chat"), contextSize: 1024, sequences: 1 },
    decision: { modelPath: ensureModel(model), contextSize: 2048 }
  }, (worker) =>
    Effect.gen(function*() {
      const prompt = yield* worker.render("decision", [{ role: "user", content: "The storm flooded the stadium before the final; the crowd went home. Was it a good day?" }])
      return yield* worker.score(prompt, heads)
    }))

describe.skipIf(noGpu !== undefined)(`parity across backends (CPU and ${gpuBackend})`, () => {
  for (const model of scripted) {
    it.live(`${model}: greedy output is token-exact on the CPU and on ${gpuBackend}`, () =>
      Effect.gen(function*() {
        const cpu = yield* greedyOn("cpu", model)
        const cuda = yield* greedyOn(gpuBackend, model)
        assert.isAbove(cpu.length, 8)
        assert.deepStrictEqual(cuda, cpu)
        console.info(`test:gpu parity: ${model}: ${cpu.length} tokens identical`)
      }), 120_000)
  }

  for (const model of ["qwen-decision", "qwen-bench"] as const) {
    it.live(`${model} (real vocabulary): decision probabilities within ${PROBABILITY_TOLERANCE}, ranks equal outside near ties`, () =>
      Effect.gen(function*() {
        const cpu = yield* scoresOn("cpu", model)
        const cuda = yield* scoresOn(gpuBackend, model)
        let maxProbability = 0
        let maxLogLikelihood = 0
        for (const [h, head] of cpu.entries()) {
          const other = cuda[h]!
          for (const [l, label] of head.labels.entries()) {
            const twin = other.labels[l]!
            assert.strictEqual(twin.label, label.label)
            maxProbability = Math.max(maxProbability, Math.abs(twin.probability - label.probability))
            if (twin.logLikelihood !== label.logLikelihood) maxLogLikelihood = Math.max(maxLogLikelihood, Math.abs(twin.logLikelihood - label.logLikelihood))
            for (const peer of head.labels) {
              if (Math.abs(peer.probability - label.probability) > 2 * PROBABILITY_TOLERANCE) {
                const peerTwin = other.labels.find((t) => t.label === peer.label)!
                assert.strictEqual(Math.sign(peerTwin.rank - twin.rank), Math.sign(peer.rank - label.rank), `${head.name}: ${peer.label} vs ${label.label}`)
              }
            }
          }
        }
        console.info(`test:gpu parity: ${model}: max |Δprobability| ${maxProbability.toExponential(2)}, max |ΔlogLikelihood| ${maxLogLikelihood.toExponential(2)} nats`)
        assert.isAtMost(maxProbability, PROBABILITY_TOLERANCE)
      }), 120_000)
  }
})
