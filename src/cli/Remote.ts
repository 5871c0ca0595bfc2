/**
 * The client side of the command line: `withClient(socket)` provides the remote Provider and
 * RemoteStore of the server on `socket` (src/rpc/Client.ts) to a command. A server that is not
 * running fails the command with the client's `ConnectError`, which names the socket.
 */
import * as Effect from "effect/Effect"
import * as Client from "../rpc/Client.js"
import type { Provider } from "../services/Provider.js"

export const RemoteStore = Client.RemoteStore

export const withClient = (socketPath: string) =>
<A, E, R>(
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, E | Client.ConnectError, Exclude<R, Provider | Client.RemoteStore>> =>
  Effect.provide(effect, Client.layer({ socketPath }))
