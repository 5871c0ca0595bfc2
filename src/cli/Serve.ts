/**
 * `nativegen serve`: the runtime (store with the packaged seed, engine child, admission,
 * scheduler, provider) and the RPC server on a Unix socket, in the foreground; with `--http`, also
 * OpenAI's and Ollama's HTTP APIs over the same runtime (one Provider), behind an optional API key.
 * It logs where it keeps things and listens, then each readiness change; SIGINT or SIGTERM
 * interrupt it, and the layers' finalizers close the servers, stop the engine child and remove
 * the sockets before the process exits.
 *
 * Settings come from flags, else the environment (`NATIVEGEN_*`, the same variables the services'
 * configs read), else the defaults.
 */
import * as Command from "@effect/cli/Command"
import * as HelpDoc from "@effect/cli/HelpDoc"
import * as Options from "@effect/cli/Options"
import * as ValidationError from "@effect/cli/ValidationError"
import * as HttpServer from "@effect/platform/HttpServer"
import * as Config from "effect/Config"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Stream from "effect/Stream"
import * as Fs from "node:fs"
import * as Os from "node:os"
import type { Readiness } from "../domain/Inference.js"
import { formatListen, HttpConfig, type HttpConfigShape, isLoopback, parseListen } from "../http/HttpConfig.js"
import * as HttpServerLayer from "../http/Server.js"
import * as ClusterOptions from "../cluster/ServeOptions.js"
import * as Runtime from "../layers/Runtime.js"
import * as BackendProbe from "../native/BackendProbe.js"
import { defaultPrefillChunk, parseThreads, type Threads } from "../native/ChildSettings.js"
import type { Backend } from "../native/Protocol.js"
import * as Client from "../rpc/Client.js"
import * as Server from "../rpc/Server.js"
import * as Admission from "../services/Admission.js"
import * as NativeWorker from "../services/NativeWorker.js"
import { Provider } from "../services/Provider.js"
import * as Scheduler from "../services/Scheduler.js"
import { StoreConfig } from "../services/Store.js"
import { CliFileError, CliUsageError, reasonOf } from "./CliError.js"
import * as Flags from "./Flags.js"
import { readinessLine } from "./Format.js"
import * as Path from "node:path"
import * as Paths from "./Paths.js"
import * as TrustedKeys from "./TrustedKeys.js"

/** Engine threads when nothing says otherwise: half the logical CPUs (about the physical cores), at least 1. */
export const defaultThreads = (parallelism: number = Os.availableParallelism()): number =>
  Math.max(1, Math.floor(parallelism / 2))

const backends = ["auto", "cpu", "cuda", "vulkan", "metal"] as const

/** Where the store is and which keys it trusts: `serve` and the `store` commands (working directly) share them. */
export const storeFlags = {
  storeRoot: Options.text("store-root").pipe(
    Options.withDescription(`Model store directory (env ${Paths.env.storeRoot}; default ${Paths.defaultStoreRoot()})`),
    Options.withDefault(Paths.defaultStoreRoot()),
    Options.withFallbackConfig(Config.string(Paths.env.storeRoot))
  ),
  trustedKeys: Options.text("trusted-keys").pipe(
    Options.withDescription(
      `Directory of PEM public keys trusted to sign manifests, added with \`nativegen keys trust\` (env ${Paths.env.trustedKeys}; ` +
        `default ${Paths.defaultTrustedKeysDir()}). The seed's key is always trusted.`
    ),
    Options.withDefault(Paths.defaultTrustedKeysDir()),
    Options.withFallbackConfig(Config.string(Paths.env.trustedKeys))
  ),
  trustKeys: Options.file("trust-key", { exists: "yes" }).pipe(
    Options.withDescription(
      "One more PEM public key to trust for this run; repeatable (also NATIVEGEN_STORE_TRUSTED_KEYS: PEM texts)"
    ),
    Options.repeated
  )
}

export const options = {
  socket: Flags.socket,
  ...storeFlags,
  threads: Options.text("threads").pipe(
    Options.withDescription(
      `Engine threads, or auto: llama.cpp's count for this machine, its physical (performance) cores ` +
        `(env NATIVEGEN_THREADS; default ${defaultThreads()}, half the logical CPUs)`
    ),
    Options.withDefault(String(defaultThreads())),
    Options.withFallbackConfig(Config.string("NATIVEGEN_THREADS")),
    Options.mapEffect((text) => {
      const threads = parseThreads(text)
      return threads === undefined
        ? Effect.fail(ValidationError.invalidValue(HelpDoc.p(`--threads ${text}: a positive integer or auto`)))
        : Effect.succeed(threads)
    })
  ),
  backend: Options.choice("backend", backends).pipe(
    Options.withDescription(
      "Engine backend (env NATIVEGEN_BACKEND); auto: CUDA, then Vulkan, then the CPU, the first whose probe child passes a warm-up step"
    ),
    Options.withDefault("auto" as const),
    Options.withFallbackConfig(Config.literal(...backends)("NATIVEGEN_BACKEND"))
  ),
  generationContext: Flags.fromEnv(
    Options.integer("generation-context"),
    "NATIVEGEN_ADMISSION_GENERATION_CONTEXT_CAP",
    Config.integer,
    "Context cap of the generation model in tokens",
    String(Admission.AdmissionConfig.defaults.contextCap.generation)
  ),
  decisionContext: Flags.fromEnv(
    Options.integer("decision-context"),
    "NATIVEGEN_ADMISSION_DECISION_CONTEXT_CAP",
    Config.integer,
    "Context cap of the decision model in tokens",
    String(Admission.AdmissionConfig.defaults.contextCap.decision)
  ),
  slots: Flags.fromEnv(
    Options.integer("slots"),
    "NATIVEGEN_SLOTS",
    Config.integer,
    "Conversations kept in the generation context at once",
    String(Scheduler.SchedulerConfig.defaults.slots)
  ),
  http: Flags.fromEnv(
    Options.text("http"),
    "NATIVEGEN_HTTP",
    Config.string,
    "Also serve OpenAI's and Ollama's HTTP APIs on HOST:PORT, [IPv6]:PORT, PORT (on 127.0.0.1) or a Unix socket path; " +
      "limits: NATIVEGEN_HTTP_* (see the README)",
    "off"
  ),
  apiKey: Flags.fromEnv(
    Options.redacted("api-key"),
    "NATIVEGEN_API_KEY",
    (name) => Config.redacted(name),
    "Key every HTTP request must present as `Authorization: Bearer <key>`"
  ),
  apiKeyFile: Flags.fromEnv(
    Options.text("api-key-file"),
    "NATIVEGEN_API_KEY_FILE",
    Config.string,
    "File holding the HTTP API key, trimmed; keeps it out of `ps` and the shell history"
  ),
  ...ClusterOptions.options
}

export interface StoreSettings {
  readonly storeRoot: string
  readonly trustedKeys: string
  readonly trustKeys: ReadonlyArray<string>
}

export interface ServeSettings extends StoreSettings, Partial<ClusterOptions.ClusterFlags> {
  readonly socket: string
  readonly threads: Threads
  readonly backend: typeof backends[number]
  readonly generationContext: Option.Option<number>
  readonly decisionContext: Option.Option<number>
  readonly slots: Option.Option<number>
  readonly http: Option.Option<string>
  readonly apiKey: Option.Option<Redacted.Redacted<string>>
  readonly apiKeyFile: Option.Option<string>
}

const storeEnv = ConfigProvider.fromEnv().pipe(ConfigProvider.constantCase, ConfigProvider.nested("NATIVEGEN_STORE"))

const readKey = (path: string) =>
  Effect.try({ try: () => Fs.readFileSync(path, "utf8"), catch: (cause) => new CliFileError({ path, reason: reasonOf(cause) }) })

/** The store's options: its env config (NATIVEGEN_STORE_*), then the flags; trusted keys from all of them. */
export const storeOptions = (settings: StoreSettings) =>
  Effect.gen(function*() {
    const store = yield* Effect.withConfigProvider(StoreConfig.config, storeEnv)
    const fromDir = yield* TrustedKeys.load(settings.trustedKeys)
    const keys = [...fromDir.map((key) => key.pem), ...(yield* Effect.forEach(settings.trustKeys, readKey))]
    return { ...store, root: settings.storeRoot, trustedKeys: [...store.trustedKeys, ...keys] }
  })

/**
 * The runtime's options: the services' own env configs (NATIVEGEN_STORE_*, NATIVEGEN_ADMISSION_*,
 * NATIVEGEN_SCHEDULER_*), then the flags.
 */
export const runtimeOptions = (settings: ServeSettings, backend: Backend) =>
  Effect.gen(function*() {
    const store = yield* storeOptions(settings)
    const admission = yield* Admission.AdmissionConfig.config
    const scheduler = yield* Scheduler.SchedulerConfig.config
    const batchDecode = yield* Config.boolean("NATIVEGEN_BATCH_DECODE").pipe(Config.withDefault(true))
    const child = { ...NativeWorker.NativeWorkerConfig.defaults.child, threads: settings.threads, backend, batchDecode }
    const prefillChunk = yield* Config.integer("NATIVEGEN_WORKER_PREFILL_CHUNK").pipe(
      Config.withDefault(defaultPrefillChunk(backend, child.batchSize))
    )
    // ggml's CUDA graphs in CUDA children: on where the CUDA build carries nativegen's graph patch, else
    // off (ChildEnvironment.backendDefaults); NATIVEGEN_CUDA_GRAPHS=true or false decides instead.
    const cudaGraphs = yield* Config.option(Config.boolean("NATIVEGEN_CUDA_GRAPHS"))
    const childEnv = Option.match(cudaGraphs, {
      onNone: () => ({}),
      onSome: (on) => ({ GGML_CUDA_DISABLE_GRAPHS: on ? "0" : "1" })
    })
    const options: Partial<Runtime.RuntimeOptions> = {
      store,
      admission: {
        ...admission,
        contextCap: {
          generation: Option.getOrElse(settings.generationContext, () => admission.contextCap.generation),
          decision: Option.getOrElse(settings.decisionContext, () => admission.contextCap.decision)
        }
      },
      worker: { child, prefillChunk, childEnv },
      scheduler: Option.match(settings.slots, { onNone: () => scheduler, onSome: (slots) => ({ ...scheduler, slots }) }),
      // A cluster's shared state-file directory (docs/cluster.md), when given.
      ...Option.match(settings.clusterConversations ?? Option.none(), {
        onNone: () => ({}),
        onSome: (directory) => ({ conversationsDirectory: Path.resolve(directory) })
      })
    }
    return options
  })

/**
 * Fails fast when a server already answers on the socket, before the engine is started for
 * nothing (the server's own lock still settles two servers starting at once).
 */
const refuseIfRunning = (socketPath: string) =>
  Effect.scoped(Client.make({ socketPath })).pipe(
    Effect.matchEffect({
      onFailure: () => Effect.void,
      onSuccess: () => Effect.fail(new Server.AlreadyRunning({ socketPath, reason: "a server accepts connections on it" }))
    })
  )

/** The API key from `--api-key` or `--api-key-file` (one of them at most), or none. */
const apiKeyOf = (settings: ServeSettings) =>
  Effect.gen(function*() {
    if (Option.isSome(settings.apiKey) && Option.isSome(settings.apiKeyFile)) {
      return yield* new CliUsageError({ reason: "give the API key once: --api-key (NATIVEGEN_API_KEY) or --api-key-file (NATIVEGEN_API_KEY_FILE)" })
    }
    const key = Option.isSome(settings.apiKeyFile)
      ? (yield* readKey(settings.apiKeyFile.value)).trim()
      : Option.isSome(settings.apiKey)
      ? Redacted.value(settings.apiKey.value).trim()
      : undefined
    if (key === "") {
      return yield* Option.isSome(settings.apiKeyFile)
        ? new CliFileError({ path: settings.apiKeyFile.value, reason: "the API key file is empty" })
        : new CliUsageError({ reason: "the API key is empty" })
    }
    return key === undefined ? undefined : Redacted.make(key)
  })

/** The HTTP server's settings when `--http` is given: the address, the key, the limits from NATIVEGEN_HTTP_*. */
export const httpConfig = (settings: ServeSettings) =>
  Effect.gen(function*() {
    const apiKey = yield* apiKeyOf(settings)
    if (Option.isNone(settings.http)) {
      if (apiKey !== undefined) yield* Effect.logWarning("an API key was given, but HTTP is off (--http ADDRESS turns it on)")
      return undefined
    }
    const listen = yield* parseListen(settings.http.value)
    const limits = yield* HttpConfig.config
    const config: HttpConfigShape = { ...limits, listen, apiKey }
    return config
  })

const urlOf = (address: HttpServer.Address) =>
  address._tag === "TcpAddress" ? `http://${formatListen({ _tag: "Tcp", host: address.hostname, port: address.port })}` : `unix:${address.path}`

/** The warning for an address other machines can reach when no key guards it; none otherwise. */
export const exposureWarning = (config: HttpConfigShape): string | undefined =>
  isLoopback(config.listen) || config.apiKey !== undefined
    ? undefined
    : `http: ${formatListen(config.listen)} can be reached from other machines and no API key is set: anyone who ` +
      "reaches it can use the models (--api-key-file sets one)"

/** The HTTP server over the runtime, logging where it listens (the bound port when 0 was asked for). */
const httpLayer = (config: HttpConfigShape) =>
  HttpServerLayer.layer(config).pipe(
    Layer.tap((context) =>
      Effect.gen(function*() {
        const address = Context.get(context, HttpServer.HttpServer).address
        yield* Effect.logInfo(
          `http: listening on ${urlOf(address)} (${config.apiKey === undefined ? "no API key" : "API key required"})`
        )
        const warning = exposureWarning(config)
        if (warning !== undefined) yield* Effect.logWarning(warning)
      })
    )
  )

/** With `--cluster`, the cluster runner over the runtime (imported only then); otherwise nothing. */
const clusterLayer = (settings: ServeSettings) =>
  Effect.gen(function*() {
    const runner = yield* ClusterOptions.settingsOf({
      cluster: settings.cluster ?? Option.none(),
      clusterStorage: settings.clusterStorage ?? Option.none(),
      clusterDetection: settings.clusterDetection ?? Option.none(),
      clusterShards: settings.clusterShards ?? Option.none(),
      clusterHold: settings.clusterHold ?? Option.none(),
      clusterSinkPort: settings.clusterSinkPort ?? Option.none()
    })
    if (runner === undefined) return Layer.empty
    const Runner = yield* Effect.promise(() => import("../cluster/Runner.js"))
    return Runner.layer(runner)
  })

const changeKey = (r: Readiness) => `${r.state}|${r.reason ?? ""}|${r.engine.incarnation}|${r.engine.pid ?? ""}`

/** Runs the server until interrupted (SIGINT/SIGTERM through NodeRuntime.runMain). */
export const serve = (settings: ServeSettings) =>
  Effect.gen(function*() {
    const socketPath = settings.socket
    yield* refuseIfRunning(socketPath)
    const selection = yield* BackendProbe.select(settings.backend, {
      settings: { ...NativeWorker.NativeWorkerConfig.defaults.child, threads: settings.threads }
    })
    for (const outcome of selection.outcomes) yield* Effect.logInfo(`backend probe: ${BackendProbe.describeOutcome(outcome)}`)
    const options = yield* runtimeOptions(settings, selection.backend)
    yield* Effect.logInfo(
      `starting (pid ${process.pid}): store ${settings.storeRoot}, socket ${socketPath}, ${selection.backend} backend` +
        `${settings.backend === "auto" ? " (auto)" : ""}, ` +
        `threads ${settings.threads}, ${options.store?.trustedKeys?.length ?? 0} trusted keys besides the seed's`
    )
    const serverOptions = yield* Server.config
    const http = yield* httpConfig(settings)
    const cluster = yield* clusterLayer(settings)
    const live = Layer.merge(Server.layer({ ...serverOptions, socketPath }), http === undefined ? Layer.empty : httpLayer(http)).pipe(
      // With --cluster, the servers get the cluster's routing Provider over the runtime's.
      Layer.provideMerge(cluster),
      // One runtime (one Provider) under both servers.
      Layer.provideMerge(Runtime.layer(options))
    )
    yield* Effect.gen(function*() {
      const provider = yield* Provider
      yield* Effect.logInfo(`listening on ${socketPath}`)
      yield* provider.readinessChanges.pipe(
        Stream.changesWith((a, b) => changeKey(a) === changeKey(b)),
        Stream.runForEach((readiness) => Effect.logInfo(readinessLine(readiness)))
      )
      return yield* Effect.never
    }).pipe(
      Effect.onInterrupt(() => Effect.logInfo("stopping: engine and socket")),
      Effect.provide(live),
      Effect.onExit((exit) => Exit.isInterrupted(exit) ? Effect.logInfo("stopped") : Effect.void)
    )
  })

export const command = Command.make("serve", options, serve).pipe(
  Command.withDescription(
    "Run the runtime and its server in the foreground (the packaged seed is imported on first use); Ctrl-C stops it"
  )
)
