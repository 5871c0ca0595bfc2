/**
 * How a `store` command reaches the model store: through the server that answers on the socket,
 * or, when nobody listens there (no socket, or a stale one), directly on the store root, under
 * the store's own cross-process lock, so that a store whose server does not start can still be
 * listed, verified, activated and reaped. The mode used is said on stderr; working directly, the
 * store's own warnings go to stderr too (its routine info lines are left out: stdout is the
 * command's output).
 */
import * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Option from "effect/Option"
import * as Net from "node:net"
import type { Readiness } from "../domain/Inference.js"
import type { Activation, Deactivation, Listing, ReapReport, VerifiedBlob } from "../rpc/Api.js"
import * as Client from "../rpc/Client.js"
import { Provider } from "../services/Provider.js"
import * as Store from "../services/Store.js"
import * as Serve from "./Serve.js"
import * as Terminal from "./Terminal.js"

/** Where the store was reached. */
export type Mode =
  | { readonly _tag: "Server"; readonly socketPath: string }
  | { readonly _tag: "Direct"; readonly socketPath: string; readonly root: string }

/** The store operations the commands use, whichever way the store was reached. */
export interface StoreAccess {
  readonly mode: Mode
  readonly list: Effect.Effect<Listing, Client.RemoteStoreError>
  readonly verify: (digest: string) => Effect.Effect<VerifiedBlob, Client.RemoteStoreError>
  readonly activate: (
    manifest: string,
    options: { readonly device?: string; readonly allowRollback?: boolean }
  ) => Effect.Effect<Activation, Client.RemoteStoreError>
  readonly deactivate: (model: string, options: { readonly device?: string }) => Effect.Effect<Deactivation, Client.RemoteStoreError>
  readonly reap: (options: { readonly grace?: Duration.DurationInput }) => Effect.Effect<ReapReport, Client.RemoteStoreError>
  /** The server's readiness (what it has loaded); none when working directly (no server runs). */
  readonly readiness: Effect.Effect<Option.Option<Readiness>>
}

export const modeLine = (mode: Mode): string =>
  mode._tag === "Server"
    ? `store: through the server on ${mode.socketPath}`
    : `store: no server listens on ${mode.socketPath}; working directly on ${mode.root}`

/**
 * True unless connecting finds no socket or nobody listening. Used only after the client could not
 * connect, so it never takes a connection slot from a working server.
 */
const listening = (socketPath: string): Effect.Effect<boolean> =>
  Effect.async<boolean>((resume) => {
    const socket = Net.createConnection({ path: socketPath })
    socket.once("connect", () => {
      socket.destroy()
      resume(Effect.succeed(true))
    })
    socket.once("error", (error: NodeJS.ErrnoException) => {
      socket.destroy()
      resume(Effect.succeed(error.code !== "ENOENT" && error.code !== "ECONNREFUSED"))
    })
    return Effect.sync(() => socket.destroy())
  })

const remoteAccess = (remote: Client.RemoteStore["Type"], provider: Provider["Type"]): StoreAccess => ({
  mode: { _tag: "Server", socketPath: remote.socketPath },
  list: remote.list,
  verify: remote.verify,
  activate: remote.activate,
  deactivate: remote.deactivate,
  reap: remote.reap,
  readiness: Effect.map(provider.readiness, Option.some)
})

const directAccess = (store: Store.Store["Type"], socketPath: string): StoreAccess => ({
  mode: { _tag: "Direct", socketPath, root: store.root },
  list: store.list,
  verify: (digest) => Effect.map(store.verify(digest), ({ digest, path, size }) => ({ digest, path, size })),
  activate: store.activate,
  deactivate: store.deactivate,
  reap: store.reap,
  readiness: Effect.succeed(Option.none())
})

const stderrLogger = Logger.prettyLogger({ stderr: true })

/** The store's logs, warnings and worse, on stderr (whichever console logger is installed). */
const logToStderr = <A, E, R>(self: Effect.Effect<A, E, R>) =>
  self.pipe(
    Effect.provide(Layer.merge(
      Logger.replace(Logger.defaultLogger, stderrLogger),
      Logger.replace(Logger.prettyLoggerDefault, stderrLogger)
    )),
    Logger.withMinimumLogLevel(LogLevel.Warning)
  )

/**
 * Runs `use` with the store of the server on `settings.socket`, or, when none listens there, with
 * the store at `settings.storeRoot` opened here (trusting the same keys `serve` would).
 */
export const withStore = (settings: Serve.StoreSettings & { readonly socket: string }) =>
<A, E, R>(use: (access: StoreAccess) => Effect.Effect<A, E, R>) =>
  Effect.scoped(Effect.gen(function*() {
    const connected = yield* Effect.either(Layer.build(Client.layer({ socketPath: settings.socket })))
    if (Either.isRight(connected)) {
      const access = remoteAccess(Context.get(connected.right, Client.RemoteStore), Context.get(connected.right, Provider))
      yield* Terminal.writeError(`${modeLine(access.mode)}\n`)
      return yield* use(access)
    }
    if (yield* listening(settings.socket)) return yield* Effect.fail(connected.left)
    return yield* logToStderr(Effect.gen(function*() {
      const options = yield* Serve.storeOptions(settings)
      const store = yield* Store.make.pipe(Effect.provide(Store.StoreConfig.layer(options)))
      const access = directAccess(store, settings.socket)
      yield* Terminal.writeError(`${modeLine(access.mode)}\n`)
      return yield* use(access)
    }))
  }))
