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
import * as RpcServer from "@effect/rpc/RpcServer"
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

/**
 * The runner protocol without its per-message stream acks. @effect/rpc acknowledges every
 * message of a streamed reply when the protocol supports it, and the runners' `Stream` RPC (which
 * carries every entity's streamed replies) then sends its next message only after the previous
 * one's Ack came back: a socket write and a wake-up more in each runner per message, and a round
 * trip before the next one may leave. The cluster does not need it for flow control: the entity's
 * own reply stream is acknowledged end to end (the entry's Sharding sends an `AckChunk` envelope
 * for each chunk once it is in the caller's buffer, and the entity's RPC server sends the next chunk
 * only after it), so a stream has at most one reply message in flight on a connection whichever
 * way, and what the runners' `Stream` queues per request is bounded by that. Both ends must agree:
 * a server that waits for acks that a client never sends stalls its streams, so the client and the
 * server protocols are changed together (every runner of a cluster runs this code).
 */
export const withoutAcks = <P extends { readonly supportsAck: boolean }>(protocol: P): P => ({ ...protocol, supportsAck: false })

/** The runner server's protocol over the socket server, without stream acks (`withoutAcks`). */
export const layerServerProtocol: Layer.Layer<RpcServer.Protocol, never, RpcSerialization.RpcSerialization | SocketServer.SocketServer> =
  Layer.scoped(RpcServer.Protocol, Effect.map(RpcServer.makeProtocolSocketServer, withoutAcks))

/** A socket to `address`: its Unix socket, or TCP with Nagle's algorithm off. */
export const openSocket = (address: RunnerAddress) =>
  NodeSocket.makeNet(
    isUnix(address)
      ? { path: address.host, openTimeout: 1000 }
      : { host: address.host, port: address.port, noDelay: true, openTimeout: 1000 }
  )

/** Connects to another runner: Unix socket or TCP with noDelay, without stream acks (`withoutAcks`). */
export const layerClientProtocol: Layer.Layer<Runners.RpcClientProtocol, never, RpcSerialization.RpcSerialization> =
  Layer.effect(
    Runners.RpcClientProtocol,
    Effect.gen(function*() {
      const serialization = yield* RpcSerialization.RpcSerialization
      // A runner that cannot be reached is a defect here: Runners turns it into RunnerUnavailable.
      return Effect.fnUntraced(function*(address: RunnerAddress) {
        const socket = yield* openSocket(address)
        const protocol = yield* RpcClient.makeProtocolSocket().pipe(
          Effect.provideService(Socket, socket),
          Effect.provideService(RpcSerialization.RpcSerialization, serialization)
        )
        return withoutAcks(protocol)
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
