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
import * as Cause from "effect/Cause"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import * as Net from "node:net"
import { EngineFailure } from "../domain/EngineError.js"
import * as Engine from "./Engine.js"
import { parseFailpoints } from "./Failpoints.js"
import { childSettingsFromEnv } from "./ChildSettings.js"
import { engineSerialization } from "./Framing.js"
import { EngineRpcs } from "./Protocol.js"
import { withReplyFaults } from "./ReplyFaults.js"
import { streamWithoutFiberMetrics, withoutFiberMetrics } from "../internal/FiberMetrics.js"

const settings = childSettingsFromEnv(process.env)
const failpoints = parseFailpoints(process.env.NATIVEGEN_FAILPOINTS, Number(process.env.NATIVEGEN_INCARNATION ?? 1))
const channel = new Net.Socket({ fd: 3, readable: true, writable: true })
// The host is gone when the channel closes; give the runtime a moment to dispose, then leave.
channel.on("close", () => {
  setTimeout(() => process.exit(0), 2_000).unref()
})

const ProtocolLive = RpcServer.layerProtocolStdio({
  stdin: NodeStream.fromReadable<Error, Uint8Array>(() => channel, (cause) => cause as Error),
  stdout: NodeSink.fromWritable(() => channel, (cause) => cause as Error)
}).pipe(Layer.provide(Layer.succeed(RpcSerialization.RpcSerialization, withReplyFaults(engineSerialization, failpoints))))

const failureOf = (operation: string, defect: unknown) =>
  new EngineFailure({ operation, reason: defect instanceof Error ? defect.message : String(defect) })

/**
 * A defect in a handler (a bug, or a library that throws) answers its request with a typed
 * EngineFailure instead of crossing the protocol as a defect the host cannot type.
 */
const typed = <A, E, R>(operation: string, effect: Effect.Effect<A, E, R>) =>
  withoutFiberMetrics(Effect.catchAllDefect(effect, (defect) => Effect.fail(failureOf(operation, defect))))

const typedStream = <A, E, R>(operation: string, stream: Stream.Stream<A, E, R>) =>
  streamWithoutFiberMetrics(
    Stream.catchSomeCause(stream, (cause) => Option.map(Cause.dieOption(cause), (defect) => Stream.fail(failureOf(operation, defect))))
  )

const faults = {
  failpoints,
  writeRaw: (bytes: Uint8Array) => void channel.write(bytes),
  exit: () => channel.end(() => process.exit(3))
}

const main = Effect.gen(function*() {
  const shutdown = yield* Deferred.make<void>()
  const engine = yield* Engine.Engine
  const Handlers = EngineRpcs.toLayer({
    Hello: () => engine.hello,
    Memory: () => engine.memory,
    Plan: ({ contextSizes, modelPath, sequences }) => typed("plan", engine.plan(modelPath, contextSizes, sequences)),
    Load: ({ contextSize, modelPath, role, sequences }) =>
      typedStream("load", engine.load(role, modelPath, contextSize, sequences)),
    Unload: ({ role }) => typed("unload", engine.unload(role)),
    Tokenize: ({ role, specialTokens, text }) => typed("tokenize", engine.tokenize(role, text, specialTokens)),
    Detokenize: ({ role, tokens }) => typed("detokenize", engine.detokenize(role, tokens)),
    // The payload carries the template inputs (tools, thinking) as its own optional fields.
    Render: (payload) => typed("render", engine.render(payload.role, payload.messages, payload.addGenerationPrompt, payload)),
    RenderText: (payload) =>
      typed("renderText", engine.renderText(payload.role, payload.messages, payload.addGenerationPrompt, payload)),
    RenderContinuation: ({ history, inputs, role, turn, turnInputs }) =>
      typed("renderContinuation", engine.renderContinuation(role, history, turn, inputs, turnInputs)),
    SaveState: ({ path, sequence }) => typed("saveState", engine.saveState(sequence, path)),
    RestoreState: ({ path, sequence }) => typed("restoreState", engine.restoreState(sequence, path)),
    Begin: (request) => typed("begin", engine.begin(request)),
    // Run ahead of the host by a few steps; a pause replays whatever the host did not receive.
    // Not wrapped: per token, and every native call in it is already typed by its step.
    // With its Begin: one request sets the generation up and starts it (the host waits one round trip).
    Advance: ({ begin, fromIndex, generationId }) =>
      streamWithoutFiberMetrics(begin === undefined ? engine.advance(generationId, fromIndex) : engine.start({ ...begin, generationId })),
    // Forgets the generation as the message is read (handlers are called in message order), so a
    // Begin sent after this End finds its sequence idle; the host does not wait for the answer.
    End: ({ generationId }) => withoutFiberMetrics(engine.endNow(generationId)),
    Score: ({ heads, prefillChunk, prompt }) => typedStream("score", engine.score(prompt, heads, prefillChunk)),
    Shutdown: () => Deferred.succeed(shutdown, undefined)
  })
  yield* Layer.launch(RpcServer.layer(EngineRpcs, { disableFatalDefects: true }).pipe(Layer.provide([Handlers, ProtocolLive]))).pipe(
    Effect.forkScoped
  )
  yield* Deferred.await(shutdown)
})

// The engine outlives the server (forked in main's scope): it is disposed after the server stops.
// Without Effect's fiber metrics (each RPC request's fibers turn them off again: see FiberMetrics).
NodeRuntime.runMain(withoutFiberMetrics(Effect.scoped(main).pipe(Effect.provide(Engine.layer(settings, faults)))), {
  // Exit as soon as the engine is disposed: the open channel would otherwise keep the process alive.
  teardown: (exit, onExit) => {
    channel.destroy()
    const code = exit._tag === "Success" ? 0 : 1
    onExit(code)
    process.exit(code)
  }
})
