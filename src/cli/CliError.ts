/**
 * The command line's own errors and how every failure becomes one line on stderr: the error's
 * message (every tagged error of the runtime, the store and the client carries one), prefixed by
 * `nativegen: `. Argument errors are printed by @effect/cli with the usage and exit with 2; other
 * failures exit with 1.
 */
import * as ValidationError from "@effect/cli/ValidationError"
import * as Cause from "effect/Cause"
import * as Data from "effect/Data"
import * as Option from "effect/Option"

/** A local file operation of the command line failed; says which file and why. */
export class CliFileError extends Data.TaggedError("CliFileError")<{
  readonly path: string
  readonly reason: string
}> {
  override get message() {
    return `${this.path}: ${this.reason}`
  }
}

/** The command line was given something it cannot use. */
export class CliUsageError extends Data.TaggedError("CliUsageError")<{
  readonly reason: string
}> {
  override get message() {
    return this.reason
  }
}

export const reasonOf = (cause: unknown): string => (cause instanceof Error ? cause.message : String(cause))

/** The one line that describes a failure (without the `nativegen: ` prefix). */
export const describe = (error: unknown): string => {
  if (typeof error === "object" && error !== null) {
    const message = "message" in error && typeof error.message === "string" ? error.message : ""
    const tag = "_tag" in error && typeof error._tag === "string" ? error._tag : undefined
    if (message !== "") return message.split("\n")[0]!
    if (tag !== undefined) return tag
  }
  return String(error).split("\n")[0]!
}

/** Exit codes: 2 for usage errors (already printed with the usage by @effect/cli), 1 otherwise. */
export const exitCodeOf = (error: unknown): number => (ValidationError.isValidationError(error) ? 2 : 1)

/** The line to print for a failed run, or none where @effect/cli already printed it. */
export const reportLine = <E>(cause: Cause.Cause<E>): Option.Option<string> => {
  const failure = Cause.failureOption(cause)
  if (Option.isSome(failure)) {
    return ValidationError.isValidationError(failure.value)
      ? Option.none()
      : Option.some(`nativegen: ${describe(failure.value)}`)
  }
  const defect = Cause.dieOption(cause)
  if (Option.isSome(defect)) return Option.some(`nativegen: internal error: ${describe(defect.value)}`)
  return Option.none()
}
