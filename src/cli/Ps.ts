/**
 * `nativegen ps`: what the running server has loaded, from its readiness: per role the model and
 * revision, the device and backend, the memory charged for its weights and its context (KV cache
 * and compute buffers) at admission, the admitted context and since when the engine holds it; and
 * the device's budget with the charges by kind. Without a server: one line saying none runs.
 */
import * as Command from "@effect/cli/Command"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import type { Readiness } from "../domain/Inference.js"
import { Provider } from "../services/Provider.js"
import { CliUsageError } from "./CliError.js"
import * as Flags from "./Flags.js"
import * as Format from "./Format.js"
import * as Remote from "./Remote.js"
import * as Terminal from "./Terminal.js"
import * as Width from "./Width.js"

/** What `ps --json` prints. */
export const processes = (readiness: Readiness, now: number) => {
  const startedAt = new Date(now - readiness.engine.uptimeMillis).toISOString()
  const device = readiness.budget?.device ?? null
  return {
    state: readiness.state,
    engine: {
      incarnation: readiness.engine.incarnation,
      pid: readiness.engine.pid,
      backend: readiness.engine.backend,
      startedAt,
      uptimeMillis: readiness.engine.uptimeMillis
    },
    memory: readiness.budget === null ? null : {
      device: readiness.budget.device,
      kind: readiness.budget.kind,
      budgetBytes: readiness.budget.budgetBytes,
      chargedBytes: readiness.budget.chargedBytes,
      freeBytes: readiness.budget.freeBytes,
      weightsBytes: readiness.budget.weightsBytes,
      kvBytes: readiness.budget.kvBytes,
      workspaceBytes: readiness.budget.workspaceBytes
    },
    requests: { running: readiness.scheduler.running, queued: readiness.scheduler.queued },
    models: readiness.roles.map((role) => ({
      role: role.role,
      model: role.model,
      revision: role.revision,
      manifestDigest: role.manifestDigest,
      device,
      backend: readiness.engine.backend,
      weightsBytes: role.weightsBytes,
      kvBytes: role.kvBytes,
      admittedContext: role.admittedContext,
      contextCap: role.contextCap,
      since: startedAt
    }))
  }
}

const bytesOrDash = (bytes: number | null) => (bytes === null ? "-" : Format.formatBytes(bytes))

/** The readable `ps`: the loaded models as a table, then the engine and the memory budget. */
export const psText = (readiness: Readiness, style: Format.Style, maxWidth?: number): string => {
  const engine = readiness.engine
  const device = readiness.budget === null ? "-" : readiness.budget.device
  const backend = engine.backend ?? "-"
  const up = Format.formatDuration(engine.uptimeMillis)
  const models = readiness.roles.length === 0
    ? `nothing is loaded (${readiness.state}${readiness.reason === null ? "" : `: ${readiness.reason}`})`
    : Format.table(
      ["role", "model", "revision", "device", "weights", "kv", "context", "up"],
      readiness.roles.map((role) => [
        role.role,
        role.model,
        role.revision === null ? "-" : String(role.revision),
        `${device}/${backend}`,
        bytesOrDash(role.weightsBytes),
        bytesOrDash(role.kvBytes),
        role.admittedContext === null ? "-" : String(role.admittedContext),
        up
      ]),
      [false, false, true, false, true, true, true, false],
      maxWidth
    )
  const lines = [
    models,
    "",
    `${Format.bold(style)("engine")}    ${readiness.state}, incarnation ${engine.incarnation}${engine.pid === null ? "" : `, pid ${engine.pid}`}, ${backend} backend, up ${up}`
  ]
  if (readiness.budget !== null) {
    const b = readiness.budget
    lines.push(
      `${Format.bold(style)("memory")}    ${b.device}: ${Format.formatBytes(b.chargedBytes)} charged of ${Format.formatBytes(b.budgetBytes)} ` +
        `(weights ${Format.formatBytes(b.weightsBytes)}, kv ${Format.formatBytes(b.kvBytes)}, workspace ${Format.formatBytes(b.workspaceBytes)}), ` +
        `${Format.formatBytes(b.freeBytes)} free`
    )
  }
  lines.push(`${Format.bold(style)("requests")}  ${readiness.scheduler.running} running, ${readiness.scheduler.queued} queued`)
  return Width.fitLines(lines.join("\n"), maxWidth)
}

export const command = Command.make("ps", { socket: Flags.socket, json: Flags.json }, (settings) =>
  Effect.gen(function*() {
    const readiness = yield* (yield* Provider).readiness
    if (settings.json) return yield* Console.log(JSON.stringify(processes(readiness, Date.now()), null, 2))
    yield* Console.log(psText(readiness, Terminal.stdoutStyle(), Terminal.stdoutColumns()))
  }).pipe(
    Remote.withClient(settings.socket),
    Effect.catchTag("ConnectError", (e) =>
      Effect.fail(new CliUsageError({ reason: `nothing is loaded: no nativegen server answers on ${e.socketPath} (${e.reason})` })))
  )).pipe(
    Command.withDescription("Show what the running server has loaded: models, device, memory charged, context, since when")
  )
