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
import { referenceLabelLogLikelihoods } from "../support/reference.js"
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
 * Where the engine's own kernels differ by more between the CPU and the GPU (node-llama-cpp's
 * in-process evaluation of the same tokens on each: random-weight models with flat logits do, by
 * 3.65e-3 and 1.71e-2 on the H200), the runtime must differ by no more than the engine does; and on
 * each backend the runtime's log-likelihoods must equal the engine's within 1e-3 nats (the CPU's
 * tolerance for chunked scoring), so no part of a difference is the runtime's.
 */
const PROBABILITY_TOLERANCE = 0.0012
const RUNTIME_TOLERANCE_NATS = 1e-3

const heads = [
  { name: "sentiment", labels: ["positive", "negative", "neutral"] },
  { name: "topic", labels: ["weather", "sports", "politics", "cooking", "music", "travel"] },
  { name: "answer", labels: ["yes", "no"] }
]

/** Softmax over a head's log-likelihoods (as the runtime's scoring computes probabilities). */
const softmax = (lls: ReadonlyArray<number>): ReadonlyArray<number> => {
  const max = Math.max(...lls)
  const weights = lls.map((ll) => (Number.isFinite(ll) ? Math.exp(ll - max) : 0))
  const total = weights.reduce((x, y) => x + y, 0)
  return weights.map((w) => (total > 0 ? w / total : 1 / weights.length))
}

const decisionPrompt = [{ role: "user" as const, content: "The storm flooded the stadium before the final; the crowd went home. Was it a good day?" }]

/** node-llama-cpp's own log-likelihoods of every head's labels, in process on `backend`, for the prompt the runtime renders. */
const engineScores = (backend: Backend, model: ModelName) =>
  Effect.gen(function*() {
    const prompt = yield* withWorker("cpu", {
      generation: { modelPath: ensureModel("qwen-chat"), contextSize: 1024, sequences: 1 },
      decision: { modelPath: ensureModel(model), contextSize: 2048 }
    }, (worker) => worker.render("decision", decisionPrompt))
    const scores: Array<Map<string, number>> = []
    for (const head of heads) {
      scores.push(yield* Effect.promise(() => referenceLabelLogLikelihoods(ensureModel(model), prompt, head.labels, 2048, backend === "cpu" ? false : backend)))
    }
    return scores
  })

const scoresOn = (backend: Backend, model: ModelName) =>
  withWorker(backend, {
    generation: { modelPath: ensureModel("qwen-chat"), contextSize: 1024, sequences: 1 },
    decision: { modelPath: ensureModel(model), contextSize: 2048 }
  }, (worker) =>
    Effect.gen(function*() {
      const prompt = yield* worker.render("decision", decisionPrompt)
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
    it.live(`${model} (real vocabulary): decision scores equal the engine's own on each backend; across backends, probabilities within ${PROBABILITY_TOLERANCE} or the engine's own difference, ranks equal outside near ties`, () =>
      Effect.gen(function*() {
        const runtime = { cpu: yield* scoresOn("cpu", model), gpu: yield* scoresOn(gpuBackend, model) }
        const engine = { cpu: yield* engineScores("cpu", model), gpu: yield* engineScores(gpuBackend, model) }
        // On each backend, the runtime's log-likelihoods are the engine's.
        let runtimeDrift = 0
        for (const side of ["cpu", "gpu"] as const) {
          for (const [h, head] of runtime[side].entries()) {
            for (const label of head.labels) {
              const own = engine[side][h]!.get(label.label)!
              const d = label.logLikelihood === own ? 0 : Math.abs(label.logLikelihood - own)
              runtimeDrift = Math.max(runtimeDrift, d)
              assert.isBelow(d, RUNTIME_TOLERANCE_NATS, `${side} ${head.name}/${label.label}: runtime ${label.logLikelihood}, engine ${own}`)
            }
          }
        }
        // Across backends: the runtime's probabilities, and the engine's for the same tokens.
        let maxProbability = 0
        let engineProbability = 0
        for (const [h, head] of runtime.cpu.entries()) {
          const other = runtime.gpu[h]!
          const engineCpu = softmax(head.labels.map((l) => engine.cpu[h]!.get(l.label)!))
          const engineGpu = softmax(head.labels.map((l) => engine.gpu[h]!.get(l.label)!))
          for (const [l, label] of head.labels.entries()) {
            const twin = other.labels[l]!
            assert.strictEqual(twin.label, label.label)
            maxProbability = Math.max(maxProbability, Math.abs(twin.probability - label.probability))
            engineProbability = Math.max(engineProbability, Math.abs(engineGpu[l]! - engineCpu[l]!))
            for (const peer of head.labels) {
              if (Math.abs(peer.probability - label.probability) > 2 * PROBABILITY_TOLERANCE) {
                const peerTwin = other.labels.find((t) => t.label === peer.label)!
                assert.strictEqual(Math.sign(peerTwin.rank - twin.rank), Math.sign(peer.rank - label.rank), `${head.name}: ${peer.label} vs ${label.label}`)
              }
            }
          }
        }
        console.info(
          `test:gpu parity: ${model}: max |Δprobability| CPU vs ${gpuBackend}: runtime ${maxProbability.toExponential(2)}, ` +
            `engine ${engineProbability.toExponential(2)} (issue: ${PROBABILITY_TOLERANCE}); runtime vs engine ${runtimeDrift.toExponential(2)} nats`
        )
        assert.isAtMost(maxProbability, Math.max(PROBABILITY_TOLERANCE, engineProbability + 1e-6))
      }), 180_000)
  }
})
