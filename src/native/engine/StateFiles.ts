/**
 * A generation sequence's KV state as a file: saved (and fsynced before answering, so an answered
 * save is on disk) or restored, each on an idle sequence and as one step in the utility lane, so
 * nothing else runs on the engine meanwhile (the fsync's libuv work has the child's single pool
 * thread to itself). The host verifies a file before it asks for a restore.
 */
import * as Effect from "effect/Effect"
import * as Fs from "node:fs"
import type { EngineFailure, InvalidEngineRequest, RoleNotLoaded } from "../../domain/EngineError.js"
import type { Generations } from "./Generation.js"
import type { Native } from "./Llama.js"

type StateError = EngineFailure | InvalidEngineRequest | RoleNotLoaded

export interface StateFiles {
  /** Writes the sequence's state to `path` (the host's temp file; it renames it into place). */
  readonly save: (index: number, path: string) => Effect.Effect<{ readonly fileBytes: number; readonly tokens: number }, StateError>
  /** Replaces the sequence's state with the file's. */
  readonly restore: (index: number, path: string) => Effect.Effect<{ readonly tokens: number }, StateError>
}

export const make = ({ step }: Native, { forgetSplit, idleSequence }: Pick<Generations, "idleSequence" | "forgetSplit">): StateFiles => ({
  save: (index, path) =>
    Effect.flatMap(idleSequence(index), (sequence) =>
      step("saveState", async () => {
        const { fileSize } = await sequence.saveStateToFile(path)
        const file = await Fs.promises.open(path, "r")
        try {
          await file.sync()
        } finally {
          await file.close()
        }
        return { fileBytes: fileSize, tokens: sequence.contextTokens.length }
      }, "utility")),
  restore: (index, path) =>
    Effect.flatMap(idleSequence(index), (sequence) =>
      step("restoreState", async () => {
        // Restored KV was computed however its file's sequence computed it: no cold split to reuse.
        forgetSplit(sequence)
        await sequence.loadStateFromFile(path, { acceptRisk: true })
        return { tokens: sequence.contextTokens.length }
      }, "utility"))
})
