/**
 * Request checks shared by the engine modules: each refusal is an `InvalidEngineRequest` naming
 * the field, the value and the rule it breaks. Also the message of a foreign failure (a library's
 * thrown value), for the typed errors that wrap one.
 */
import * as Effect from "effect/Effect"
import { InvalidEngineRequest } from "../../domain/EngineError.js"

/** The message of a thrown value. */
export const reasonOf = (cause: unknown): string => (cause instanceof Error ? cause.message : String(cause))

export const invalid = (field: string, value: unknown, reason: string) =>
  new InvalidEngineRequest({ field, value: JSON.stringify(value) ?? String(value), reason })

export const checkPositiveInt = (field: string, value: number) =>
  Number.isInteger(value) && value > 0 ? Effect.void : Effect.fail(invalid(field, value, "must be a positive integer"))

/** Every prompt token is a token of the model (an id in `[0, vocabularySize)`). */
export const checkPromptTokens = (prompt: ReadonlyArray<number>, vocabularySize: number) => {
  const badToken = prompt.find((t) => !Number.isInteger(t) || t < 0 || t >= vocabularySize)
  return badToken === undefined ? Effect.void : Effect.fail(invalid("prompt", badToken, "is not a token of the model"))
}
