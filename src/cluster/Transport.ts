/**
 * The runner-to-runner transport: @effect/cluster's socket protocol over TCP with Nagle's
 * algorithm off on both ends (a streamed chunk leaves when it is written, instead of waiting up to
 * tens of milliseconds for the previous one's acknowledgement), or over a Unix socket for runners
 * on one host. A runner address whose host is an absolute path (port 0) names a Unix socket.
 */
import * as Runners from "@effect/cluster/Runners"
import { RunnerAddress } from "@effect/cluster/RunnerAddress"
import * as NodeSocket from "@effect/platform-node/NodeSocket"
import * as NodeSocketServer from "@effect/platform-node/NodeSocketServer"
import { Socket } from "@effect/platform/Socket"
import * as SocketServer from "@effect/platform/SocketServer"
import * as RpcClient from "@effect/rpc/RpcClient"
import * as RpcSerialization from "@effect/rpc/RpcSerialization"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Fs from "node:fs"
import * as Net from "node:net"
import * as Path from "node:path"

/** Whether a runner address names a Unix socket (its host is the socket's absolute path). */
export const isUnix = (address: RunnerAddress): boolean => Path.isAbsolute(address.host)

/** The runner address of a Unix socket path. */
export const unixAddress = (path: string): RunnerAddress => RunnerAddress.make({ host: Path.resolve(path), port: 0 })

/** How an address is shown: the socket path, or HOST:PORT. */
export const formatAddress = (address: RunnerAddress): string =>
  isUnix(address) ? address.host : Net.isIPv6(address.host) ? `[${address.host}]:${address.port}` : `${address.host}:${address.port}`

/** Connects to another runner: Unix socket or TCP with noDelay. */
export const layerClientProtocol: Layer.Layer<Runners.RpcClientProtocol, never, RpcSerialization.RpcSerialization> =
  Layer.effect(
    Runners.RpcClientProtocol,
    Effect.gen(function*() {
      const serialization = yield* RpcSerialization.RpcSerialization
      // A runner that cannot be reached is a defect here: Runners turns it into RunnerUnavailable.
      return Effect.fnUntraced(function*(address: RunnerAddress) {
        const socket = yield* NodeSocket.makeNet(
          isUnix(address)
            ? { path: address.host, openTimeout: 1000 }
            : { host: address.host, port: address.port, noDelay: true, openTimeout: 1000 }
        )
        return yield* RpcClient.makeProtocolSocket().pipe(
          Effect.provideService(Socket, socket),
          Effect.provideService(RpcSerialization.RpcSerialization, serialization)
        )
      }, Effect.orDie)
    })
  )

/**
 * Removes a Unix socket file that nothing answers on (left by a runner that was killed); a socket
 * that accepts a connection is left alone, and listening on it then fails as address in use.
 */
const removeStaleSocket = (path: string) =>
  Effect.async<void>((resume) => {
    if (!Fs.existsSync(path)) return resume(Effect.void)
    const probe = Net.createConnection({ path })
    probe.once("connect", () => {
      probe.destroy()
      resume(Effect.void)
    })
    probe.once("error", () => {
      Fs.rmSync(path, { force: true })
      resume(Effect.void)
    })
    return Effect.sync(() => probe.destroy())
  })

/** Listens for other runners at `address` (its listen address): Unix socket, or TCP with noDelay on accepted sockets. */
export const layerSocketServer = (
  address: RunnerAddress
): Layer.Layer<SocketServer.SocketServer, SocketServer.SocketServerError> =>
  isUnix(address)
    ? Layer.unwrapEffect(Effect.as(removeStaleSocket(address.host), NodeSocketServer.layer({ path: address.host })))
    : NodeSocketServer.layer({ host: address.host, port: address.port, noDelay: true })
