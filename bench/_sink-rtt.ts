/**
 * A development tool (not a figure): what one call on a runner's sink (ChunkChannel's @effect/rpc
 * over a Unix socket) costs, apart from everything else a turn does. `node --import tsx
 * bench/_sink-rtt.ts [calls]` starts a sink in a child process (this file with `serve`, its
 * TurnServer answering at once) and times sequential calls from this process: Push of one Text
 * chunk to a turn nobody awaits (answered false), and Serve answered NotOwner; beside them, a
 * plain Node round trip of the same bytes over a Unix socket (the floor).
 */
import { RunnerAddress } from "@effect/cluster/RunnerAddress"
import * as NodeSocket from "@effect/platform-node/NodeSocket"
import { Socket } from "@effect/platform/Socket"
import * as RpcClient from "@effect/rpc/RpcClient"
import * as RpcSerialization from "@effect/rpc/RpcSerialization"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Scope from "effect/Scope"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Net from "node:net"
import * as Os from "node:os"
import * as Path from "node:path"
import { ChunkRpcs, layerSink, NotOwner, TurnServer } from "../src/cluster/ChunkChannel.js"
import { processCpu } from "./_proccpu.js"


const CALLS = Number(process.argv[3] ?? process.argv[2] ?? 2000)

if (process.argv[2] === "serve") {
  const path = process.argv[3]!
  const address = RunnerAddress.make({ host: path, port: 0 })
  const turns = Layer.succeed(TurnServer, TurnServer.of({ serve: (turn) => Effect.fail(new NotOwner({ conversation: turn.conversation })), serveOneOff: () => Effect.fail(new NotOwner({})), serveDecision: () => Effect.fail(new NotOwner({})) }))
  // The sink listens at `${path}.chunks`; an echo server beside it at `${path}.echo` (the floor).
  const echo = Net.createServer((socket) => socket.on("data", (data) => socket.write(data)))
  echo.listen(`${path}.echo`)
  Effect.runFork(Layer.launch(layerSink(address, address).pipe(Layer.provide(turns))))
  process.stdout.write("ready\n")
} else {
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "ngrtt-"))
  const path = Path.join(dir, "r")
  const child = ChildProcess.spawn(process.execPath, ["--import", "tsx", import.meta.filename, "serve", path], { stdio: ["ignore", "pipe", "inherit"] })
  await new Promise<void>((resolve) => child.stdout.once("data", () => resolve()))
  while (!Fs.existsSync(`${path}.chunks`) || !Fs.existsSync(`${path}.echo`)) await new Promise((r) => setTimeout(r, 20))

  const time = async (name: string, call: () => Promise<unknown>) => {
    for (let i = 0; i < 200; i++) await call()
    const t = performance.now()
    const cpu = process.cpuUsage()
    const serverCpu = processCpu(child.pid!)
    for (let i = 0; i < CALLS; i++) await call()
    const used = process.cpuUsage(cpu)
    const perCall = (us: number) => (us / CALLS).toFixed(0)
    console.log(`${name}: ${perCall((performance.now() - t) * 1000)} µs per call; CPU µs per call: caller ${perCall(used.user + used.system)}, ` +
      `sink ${perCall((processCpu(child.pid!) - serverCpu) * 1000)}`)
  }

  const floor = Net.createConnection({ path: `${path}.echo` })
  await new Promise((r) => floor.once("connect", r))
  const bytes = Buffer.alloc(200, 1)
  await time("plain Node socket round trip (200 bytes)", () =>
    new Promise<void>((resolve) => {
      floor.once("data", () => resolve())
      floor.write(bytes)
    }))

  const sinkAddress = RunnerAddress.make({ host: `${path}.chunks`, port: 0 })
  const scope = Effect.runSync(Scope.make())
  const client = await Effect.runPromise(Effect.gen(function*() {
    const socket = yield* NodeSocket.makeNet({ path: sinkAddress.host })
    const protocol = yield* RpcClient.makeProtocolSocket().pipe(Effect.provideService(Socket, socket), Effect.provide(RpcSerialization.layerMsgPack))
    return yield* RpcClient.make(ChunkRpcs, { disableTracing: true }).pipe(Effect.provideService(RpcClient.Protocol, protocol))
  }).pipe(Scope.extend(scope)))
  const text = { _tag: "Text" as const, channel: "answer" as const, text: "hello", tokens: [1] }
  await time("sink Push (one Text chunk, answered false)", () =>
    Effect.runPromise(client.Push({ turn: "t", chunks: [{ turn: "t", index: 0, seq: 0, chunk: text }] })))
  await time("sink Serve (answered NotOwner)", () =>
    Effect.runPromise(Effect.flip(client.Serve({
      conversation: "c",
      turn: "t",
      request: { messages: [{ role: "user", content: "and the harbor?" }], conversation: "c", maxTokens: 32, sampling: { temperature: 0 } },
      sink: sinkAddress
    }))))
  child.kill()
  floor.destroy()
  Fs.rmSync(dir, { recursive: true, force: true })
  process.exit(0)
}
