/**
 * nativegen as a user runs it: a real `nativegen serve` process (bin/nativegen.js) in a private
 * home whose store holds the benchmark model, signed by a key the home trusts and active for
 * generation; the typed client (src/rpc/Client.ts) over its socket, and its HTTP API on a
 * loopback port. The home, the store and the server come from the CLI and store test support
 * (test/cli/support.ts, test/store/helpers.ts), so the benchmark sets up what the tests set up.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { sha256File } from "../../fixtures/models.js"
import type { GenerateRequest } from "../../src/domain/Inference.js"
import { Digest } from "../../src/domain/Digest.js"
import { Artifact, ggufMediaType, Manifest } from "../../src/domain/Manifest.js"
import * as Client from "../../src/rpc/Client.js"
import { Provider } from "../../src/services/Provider.js"
import { makeHome, startServer, type Home } from "../../test/cli/support.js"
import { makeKey, makeStore, signWith } from "../../test/store/helpers.js"
import { freePort } from "./LlamaServer.js"

export interface Settings {
  readonly modelPath: string
  readonly modelName: string
  readonly threads: number
  readonly contextSize: number
  /** The engine backend (`NATIVEGEN_BACKEND`); absent: serve's own default. */
  readonly backend?: string | undefined
}

export interface Served {
  readonly home: Home
  readonly socket: string
  readonly httpUrl: string
  readonly enginePid: number
  readonly provider: Provider["Type"]
}

/** The store of `home` with `modelPath` active for generation under `modelName`, signed by a key `home` trusts. */
export const prepareStore = (home: Home, settings: Pick<Settings, "modelPath" | "modelName">) =>
  Effect.scoped(Effect.gen(function*() {
    const key = makeKey()
    const trusted = Path.join(home.env.XDG_CONFIG_HOME!, "nativegen", "trusted-keys")
    Fs.mkdirSync(trusted, { recursive: true })
    Fs.writeFileSync(Path.join(trusted, `${key.keyId.replace(/[^\w-]/g, "_")}.pub`), key.publicPem)
    const store = yield* makeStore(storeRoot(home), [key])
    const digest = Digest.make(sha256File(settings.modelPath))
    const size = Fs.statSync(settings.modelPath).size
    yield* store.stage(settings.modelPath, digest, size)
    yield* store.activate(signWith(key, new Manifest({
      name: settings.modelName,
      role: "generation",
      revision: 1,
      artifacts: [new Artifact({ digest, size, mediaType: ggufMediaType })]
    })))
  })).pipe(Effect.orDie)

export const storeRoot = (home: Home) => Path.join(home.env.XDG_DATA_HOME!, "nativegen", "store")

/**
 * The server's environment: threads, the generation context, the HTTP API on `port`, and as many
 * sequences for requests without a conversation as llama-server's default parallel slots (4), so
 * the concurrent figures compare like with like (nativegen's default is 1, beside its 2
 * conversation slots: each sequence holds a whole context of KV memory).
 */
export const serverEnvironment = (home: Home, settings: Settings, port: number): Record<string, string> => ({
  ...engineKnobs(),
  NATIVEGEN_STORE_ROOT: storeRoot(home),
  NATIVEGEN_THREADS: String(settings.threads),
  NATIVEGEN_ADMISSION_GENERATION_CONTEXT_CAP: String(settings.contextSize),
  NATIVEGEN_ADMISSION_DECISION_CONTEXT_CAP: "512",
  NATIVEGEN_SCHEDULER_ANONYMOUS_SLOTS: String(LLAMA_SERVER_DEFAULT_SLOTS),
  NATIVEGEN_HTTP: `127.0.0.1:${port}`,
  ...(settings.backend === undefined ? {} : { NATIVEGEN_BACKEND: settings.backend })
})

/**
 * The engine settings a benchmark run may vary from its own environment (the test support's
 * `environment` drops the outer shell's NATIVEGEN_* variables): CUDA graphs, the prefill chunk,
 * batched decode.
 */
const engineKnobNames = ["NATIVEGEN_CUDA_GRAPHS", "NATIVEGEN_WORKER_PREFILL_CHUNK", "NATIVEGEN_BATCH_DECODE"]
const engineKnobs = (): Record<string, string> =>
  Object.fromEntries(engineKnobNames.flatMap((name) => (process.env[name] === undefined ? [] : [[name, process.env[name]!]])))

/** llama-server's default number of parallel slots (`--parallel`, auto: 4). */
export const LLAMA_SERVER_DEFAULT_SLOTS = 4

/**
 * `nativegen serve` over a fresh home holding the model, with a connected client, for the scope;
 * `extraEnv` adds to the server's environment (a measurement's profiler, bench/tokencost.ts).
 */
export const serve = (settings: Settings, extraEnv: Record<string, string> = {}): Effect.Effect<Served, never, Scope.Scope> =>
  Effect.gen(function*() {
    const home = yield* makeHome
    yield* prepareStore(home, settings)
    const port = yield* freePort
    // A loaded machine can take minutes to start the engine child through tsx and warm it.
    const server = yield* startServer(home, { ...serverEnvironment(home, settings, port), ...extraEnv }, "10 minutes")
    const context = yield* Layer.build(Client.layer({ socketPath: server.socket })).pipe(Effect.orDie)
    return { home, socket: server.socket, httpUrl: `http://127.0.0.1:${port}`, enginePid: server.enginePid, provider: Context.get(context, Provider) }
  })

/** What one generation through the client showed (times from the call, in ms). */
export interface Generated {
  /** Per generated token, when its Text chunk arrived. */
  readonly arrivals: ReadonlyArray<number>
  readonly totalMillis: number
  readonly promptTokens: number
  readonly reusedTokens: number
  readonly generatedTokens: number
  readonly firstTokenMillis: number
  readonly checkpoint: GenerateRequest["checkpoint"]
  readonly answer: string
}

/** One generation through the client; a failure is a defect of the run (the benchmark stops with it). */
export const generate = (provider: Provider["Type"], request: GenerateRequest): Effect.Effect<Generated> =>
  Effect.gen(function*() {
    const arrivals: Array<number> = []
    let answer = ""
    const start = performance.now()
    let done: Extract<Stream.Stream.Success<ReturnType<Provider["Type"]["generate"]>>, { _tag: "Done" }> | undefined
    yield* Stream.runForEach(provider.generate(request), (chunk) =>
      Effect.sync(() => {
        if (chunk._tag === "Text") {
          const t = performance.now() - start
          for (let i = 0; i < chunk.tokens.length; i++) arrivals.push(t)
          if (chunk.channel === "answer") answer += chunk.text
        } else if (chunk._tag === "Done") done = chunk
      }))
    if (done === undefined) return yield* Effect.dieMessage("generation ended without a Done chunk")
    return {
      arrivals,
      totalMillis: performance.now() - start,
      promptTokens: done.usage.promptTokens,
      reusedTokens: done.usage.reusedTokens,
      generatedTokens: done.usage.generatedTokens,
      firstTokenMillis: done.timings.firstTokenMillis,
      checkpoint: done.checkpoint,
      answer
    } satisfies Generated
  }).pipe(Effect.orDie)
