/**
 * `nativegen decide --prompt TEXT --head NAME=LABEL,LABEL ...`: scores each head's labels on the
 * decision model of a running server and prints a table of labels, probabilities and ranks
 * (`--json`: the DecideResult).
 */
import * as Command from "@effect/cli/Command"
import * as HelpDoc from "@effect/cli/HelpDoc"
import * as Options from "@effect/cli/Options"
import * as ValidationError from "@effect/cli/ValidationError"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import type { DecisionHead } from "../domain/Inference.js"
import { DecideResult } from "../domain/Inference.js"
import { Provider } from "../services/Provider.js"
import * as Flags from "./Flags.js"
import * as Format from "./Format.js"
import * as Input from "./Input.js"
import * as Remote from "./Remote.js"
import * as Terminal from "./Terminal.js"

export const options = {
  socket: Flags.socket,
  json: Flags.json,
  prompt: Options.text("prompt").pipe(Options.withAlias("p"), Options.withDescription("The text to decide about")),
  heads: Options.text("head").pipe(
    Options.withDescription("A decision head and its labels, NAME=LABEL,LABEL,...; repeatable"),
    Options.atLeast(1),
    Options.mapEffect((texts) =>
      Either.mapLeft(Input.parseHeads(texts), (reason) => ValidationError.invalidValue(HelpDoc.p(reason)))
    )
  )
}

export interface DecideSettings {
  readonly socket: string
  readonly json: boolean
  readonly prompt: string
  readonly heads: ReadonlyArray<DecisionHead>
}

const encode = Schema.encodeSync(DecideResult)

export const decide = (settings: DecideSettings) =>
  Effect.gen(function*() {
    const provider = yield* Provider
    const result = yield* provider.decide({ prompt: settings.prompt, heads: settings.heads })
    if (settings.json) return yield* Console.log(JSON.stringify(encode(result), null, 2))
    yield* Console.log(Format.decideTable(result, Terminal.stdoutColumns()))
    yield* Terminal.writeError(`${Format.dim(Terminal.stderrStyle())(Format.decideFooter(result))}\n`)
  }).pipe(Remote.withClient(settings.socket))

export const command = Command.make("decide", options, decide).pipe(
  Command.withDescription("Score labels on the decision model of a running server: probabilities and ranks per head")
)
