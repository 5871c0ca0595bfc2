/**
 * `nativegen status`: the readiness of a running server as a readable summary (`--json`: the
 * whole Readiness object; `--watch`: one line per change until interrupted).
 */
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import { Readiness } from "../domain/Inference.js"
import { Provider } from "../services/Provider.js"
import * as Flags from "./Flags.js"
import * as Format from "./Format.js"
import * as Remote from "./Remote.js"
import * as Terminal from "./Terminal.js"

export const options = {
  socket: Flags.socket,
  json: Flags.json,
  watch: Options.boolean("watch").pipe(Options.withAlias("w"), Options.withDescription("Print each readiness change until Ctrl-C"))
}

const encode = Schema.encodeSync(Readiness)

export const status = (settings: { readonly socket: string; readonly json: boolean; readonly watch: boolean }) =>
  Effect.gen(function*() {
    const provider = yield* Provider
    if (settings.watch) {
      return yield* provider.readinessChanges.pipe(
        Stream.runForEach((readiness) =>
          Console.log(settings.json ? JSON.stringify(encode(readiness)) : `${new Date().toISOString()}  ${Format.readinessLine(readiness)}`)
        )
      )
    }
    const readiness = yield* provider.readiness
    if (settings.json) return yield* Console.log(JSON.stringify(encode(readiness), null, 2))
    // Model names come from the store's listing; without it the summary shows model files.
    const names = yield* (yield* Remote.RemoteStore).list.pipe(
      Effect.map((listing) => new Map(listing.active.map((m) => [m.manifestDigest as string, m.model]))),
      Effect.orElseSucceed(() => new Map<string, string>())
    )
    yield* Console.log(Format.readinessSummary(readiness, Terminal.stdoutStyle(), names, Terminal.stdoutColumns()))
  }).pipe(Remote.withClient(settings.socket))

export const command = Command.make("status", options, status).pipe(
  Command.withDescription("Show the readiness of a running server: engine, budget, models and admitted contexts")
)
