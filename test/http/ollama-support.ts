/**
 * For the Ollama API tests: a real runtime (engine child on the generated models) behind the HTTP
 * server on a free loopback port, as test/http/support.ts builds it, except that the server's
 * Provider records how each generation's stream ended (whole, or cut before its Done chunk: to see
 * an abort stop it), and the real `ollama` client pointed at it. One per test file.
 */
import * as HttpServerTag from "@effect/platform/HttpServer"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import type * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Queue from "effect/Queue"
import * as Schedule from "effect/Schedule"
import * as Stream from "effect/Stream"
import { Ollama } from "ollama"
import { ensureModel, type ModelName } from "../../fixtures/models.js"
import { HttpConfig, type HttpConfigShape } from "../../src/http/HttpConfig.js"
import * as Http from "../../src/http/Server.js"
import { Provider } from "../../src/services/Provider.js"
import { runtimeLayer } from "../support/engine.js"

/** How a generation's stream ended: whole (its Done chunk was given), and the exit its scope closed with. */
export interface Ending {
  readonly whole: boolean
  readonly exit: Exit.Exit<unknown, unknown>
}

export class OllamaTest extends Context.Tag("test/http/OllamaTest")<OllamaTest, {
  readonly baseUrl: string
  /** The runtime's own Provider (the server's, without the recording). */
  readonly provider: Provider["Type"]
  /** One entry per generation the server starts: completes when its stream ends, whole or cut. */
  readonly generations: Queue.Queue<Deferred.Deferred<Ending>>
  readonly client: Ollama
}>() {
  static readonly layer = (models: { readonly generation: ModelName; readonly decision: ModelName }) =>
    Layer.scoped(
      OllamaTest,
      Effect.gen(function*() {
        const runtime = yield* Layer.build(runtimeLayer({}, {
          generation: ensureModel(models.generation),
          decision: ensureModel(models.decision)
        }))
        const provider = Context.get(runtime, Provider)
        yield* provider.readinessChanges.pipe(Stream.takeUntil((r) => r.state === "ready"), Stream.runDrain)
        const generations = yield* Queue.unbounded<Deferred.Deferred<Ending>>()
        const observed = Provider.of({
          ...provider,
          generate: (request) =>
            Stream.unwrapScoped(Effect.gen(function*() {
              const ended = yield* Deferred.make<Ending>()
              let whole = false
              yield* Effect.addFinalizer((exit) => Deferred.succeed(ended, { whole, exit }))
              yield* Queue.offer(generations, ended)
              return provider.generate(request).pipe(Stream.tap((chunk) => Effect.sync(() => (whole ||= chunk._tag === "Done"))))
            }))
        })
        const config: HttpConfigShape = { ...HttpConfig.defaults, listen: { _tag: "Tcp", host: "127.0.0.1", port: 0 } }
        const server = yield* Layer.build(Http.layer(config).pipe(Layer.provide(Layer.succeed(Provider, observed))))
        const { address } = Context.get(server, HttpServerTag.HttpServer)
        if (address._tag !== "TcpAddress") return yield* Effect.dieMessage("the server listens on TCP")
        const baseUrl = `http://${address.hostname}:${address.port}`
        return { baseUrl, provider, generations, client: new Ollama({ host: baseUrl }) }
      })
    )
}

/** Waits until the engine runs and queues nothing (the scheduler's counts, polled). */
export const idle = (provider: Provider["Type"]) =>
  provider.readiness.pipe(
    Effect.repeat({ schedule: Schedule.spaced("20 millis"), until: (r) => r.scheduler.running === 0 && r.scheduler.queued === 0 }),
    Effect.timeoutFail({ duration: "20 seconds", onTimeout: () => new Error("the engine kept running the cancelled generation") })
  )

/** Empties the record of generations (between tests). */
export const forgetGenerations = Effect.flatMap(OllamaTest, ({ generations }) => Queue.takeAll(generations))
