/**
 * The engine child's entry point. Started by NativeWorker with the protocol socket on fd 3 and
 * its settings in the environment (NATIVEGEN_BACKEND, NATIVEGEN_THREADS, NATIVEGEN_BATCH_SIZE).
 * It serves EngineRpcs until the host asks it to shut down or the socket closes (the host died):
 * either way it disposes the engine and exits, so no child outlives its host.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as NodeSink from "@effect/platform-node/NodeSink"
import * as NodeStream from "@effect/platform-node/NodeStream"
import * as RpcSerialization from "@effect/rpc/RpcSerialization"
import * as RpcServer from "@effect/rpc/RpcServer"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Net from "node:net"
import { makeEngine } from "./Engine.js"
import { parseFailpoints } from "./Failpoints.js"
import { childSettingsFromEnv } from "./ChildSettings.js"
import { engineSerialization } from "./Framing.js"
import { EngineRpcs } from "./Protocol.js"

const settings = childSettingsFromEnv(process.env)
const channel = new Net.Socket({ fd: 3, readable: true, writable: true })
// The host is gone when the channel closes; give the runtime a moment to dispose, then leave.
channel.on("close", () => {
  setTimeout(() => process.exit(0), 2_000).unref()
})

const ProtocolLive = RpcServer.layerProtocolStdio({
  stdin: NodeStream.fromReadable<Error, Uint8Array>(() => channel, (cause) => cause as Error),
  stdout: NodeSink.fromWritable(() => channel, (cause) => cause as Error)
}).pipe(Layer.provide(Layer.succeed(RpcSerialization.RpcSerialization, engineSerialization)))

const main = Effect.gen(function*() {
  const shutdown = yield* Deferred.make<void>()
  const faults = {
    failpoints: parseFailpoints(process.env.NATIVEGEN_FAILPOINTS, Number(process.env.NATIVEGEN_INCARNATION ?? 1)),
    writeRaw: (bytes: Uint8Array) => void channel.write(bytes),
    exit: () => channel.end(() => process.exit(3))
  }
  const engine = yield* Effect.acquireRelease(makeEngine(settings, faults), (engine) => engine.dispose)
  const Handlers = EngineRpcs.toLayer({
    Hello: () => engine.hello,
    Memory: () => engine.memory,
    Plan: ({ contextSizes, modelPath, sequences }) => engine.plan(modelPath, contextSizes, sequences),
    Load: ({ contextSize, modelPath, role, sequences }) => engine.load(role, modelPath, contextSize, sequences),
    Unload: ({ role }) => engine.unload(role),
    Tokenize: ({ role, specialTokens, text }) => engine.tokenize(role, text, specialTokens),
    Detokenize: ({ role, tokens }) => engine.detokenize(role, tokens),
    Render: ({ addGenerationPrompt, messages, role }) => engine.render(role, messages, addGenerationPrompt),
    RenderText: ({ addGenerationPrompt, messages, role }) => engine.renderText(role, messages, addGenerationPrompt),
    SaveState: ({ path, sequence }) => engine.saveState(sequence, path),
    RestoreState: ({ path, sequence }) => engine.restoreState(sequence, path),
    Begin: (request) => engine.begin(request),
    // Run ahead of the host by a few steps; a pause replays whatever the host did not receive.
    Advance: ({ fromIndex, generationId }) => engine.advance(generationId, fromIndex),
    End: ({ generationId }) => engine.end(generationId),
    Score: ({ heads, prompt }) => engine.score(prompt, heads),
    Shutdown: () => Deferred.succeed(shutdown, undefined)
  })
  yield* Layer.launch(RpcServer.layer(EngineRpcs, { disableFatalDefects: true }).pipe(Layer.provide([Handlers, ProtocolLive]))).pipe(
    Effect.forkScoped
  )
  yield* Deferred.await(shutdown)
})

NodeRuntime.runMain(Effect.scoped(main), {
  // Exit as soon as the engine is disposed: the open channel would otherwise keep the process alive.
  teardown: (exit, onExit) => {
    channel.destroy()
    const code = exit._tag === "Success" ? 0 : 1
    onExit(code)
    process.exit(code)
  }
})
