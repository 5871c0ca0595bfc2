/**
 * Admission over one real engine child, for the measurements of what a role costs that child
 * (test/admission/*, bench/admission.ts): the child's resident set (/proc), a planner that asks the
 * child, context admission over the child's hello, and a role used once so its buffers are touched.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Stream from "effect/Stream"
import * as Fs from "node:fs"
import { EngineUnavailable } from "../../src/domain/EngineError.js"
import type { EngineClient } from "../../src/native/ChildProcess.js"
import type { HelloInfo, Role } from "../../src/native/Protocol.js"
import * as Admission from "../../src/services/Admission.js"

/** Whether this machine has /proc (the resident set is read there). */
export const hasProc = Fs.existsSync("/proc/self/status")

/** Resident set size of a process, in bytes. */
export const residentBytes = (pid: number) =>
  Effect.sync(() => Number(/VmRSS:\s+(\d+)/.exec(Fs.readFileSync(`/proc/${pid}/status`, "utf8"))![1]) * 1024)

/** Bytes as MiB, for the printed figures. */
export const mib = (bytes: number, digits = 1) => (bytes / 1048576).toFixed(digits)

/** Admission's planner over the child's own Plan call. */
export const childPlanner = (client: EngineClient): Admission.Planner => (modelPath, contextSizes, sequences) =>
  client.Plan({ modelPath, contextSizes, sequences }).pipe(
    Effect.catchTag("RpcClientError", (e) => Effect.fail(new EngineUnavailable({ reason: e.message })))
  )

/** Context admission (default configuration) over the device the child's hello published. */
export const admissionOver = (hello: HelloInfo) =>
  Admission.Admission.pipe(
    Effect.provide(Admission.layer.pipe(
      Layer.provide(Admission.DeviceInventory.layerPublished(hello)),
      Layer.provide(Admission.AdmissionConfig.layerDefaults)
    ))
  )

/**
 * Uses a loaded role once the way requests will, so its buffers are touched: up to 600 tokens of
 * `text` (within the context) as a prefill in one 512-token chunk and two decoded tokens for the
 * generation, a score of two labels for the decision.
 */
export const useRoleOnce = (client: EngineClient, role: Role, contextSize: number, text: string) =>
  Effect.gen(function*() {
    const tokens = yield* client.Tokenize({ role, text, specialTokens: false })
    const input = tokens.slice(0, Math.min(tokens.length, 600, contextSize - 8))
    if (role === "decision") {
      return yield* Stream.runDrain(client.Score({ prompt: input, heads: [{ name: "h", labels: ["yes", "no"] }], prefillChunk: 512 }))
    }
    yield* client.Begin({
      generationId: "measure",
      lane: "foreground",
      sequence: 0,
      prompt: input,
      sampling: { temperature: 0 },
      maxTokens: 2,
      stopTokens: [],
      prefillChunk: 512
    })
    yield* Stream.runDrain(client.Advance({ generationId: "measure", fromIndex: 0 }))
    yield* client.End({ generationId: "measure" })
  })
