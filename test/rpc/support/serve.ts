/**
 * Test wiring: a server on a socket in a fresh temporary directory over the test Provider and a
 * real store, and typed clients of it.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Client from "../../../src/rpc/Client.js"
import * as Server from "../../../src/rpc/Server.js"
import { Provider } from "../../../src/services/Provider.js"
import { storeLayer, type TestKey } from "../../store/helpers.js"
import * as TestProvider from "./TestProvider.js"

/** A fresh temporary directory (short: socket paths are limited), removed with the scope. */
export const tempDir: Effect.Effect<string, never, Scope.Scope> = Effect.acquireRelease(
  Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "ng-rpc-"))),
  (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
)

export interface Served {
  readonly dir: string
  readonly socketPath: string
  readonly control: TestProvider.TestProviderControl
}

/** A server (over the test Provider and a store trusting `keys`) for the scope. */
export const serve = (
  options: Partial<Server.ServerOptions> = {},
  keys: ReadonlyArray<TestKey> = []
): Effect.Effect<Served, Server.ServerStartError, Scope.Scope> =>
  Effect.gen(function*() {
    const dir = yield* tempDir
    const socketPath = Path.join(dir, "run", "nativegen.sock")
    const context = yield* Layer.build(
      Server.layer({ ...Server.defaults, socketPath, ...options }).pipe(
        Layer.provideMerge(TestProvider.layer),
        Layer.provideMerge(storeLayer(Path.join(dir, "store"), keys))
      )
    ).pipe(Effect.catchTags({
      UnsafePath: Effect.die,
      StoreIoError: Effect.die,
      InvalidKey: Effect.die,
      JournalCorrupt: Effect.die
    }))
    return { dir, socketPath, control: Context.get(context, TestProvider.TestControl) }
  })

/** A typed client of `socketPath` for the scope. */
export const connect = (socketPath: string) =>
  Effect.map(Layer.build(Client.layer({ socketPath })), (context) => ({
    provider: Context.get(context, Provider),
    store: Context.get(context, Client.RemoteStore)
  }))
