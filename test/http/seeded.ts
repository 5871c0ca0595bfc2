/**
 * The HTTP server over the store-backed runtime, as `nativegen serve` runs it: a temporary store
 * that imports the packaged seed (qwen-chat and qwen-decision, their bytes copied from the model
 * cache instead of generated again) and runs what it activated. The Store is in the server's
 * context, so the `/nativegen/models` routes have one. Share one per test file (`HttpSeeded.layer`).
 */
import * as HttpServerTag from "@effect/platform/HttpServer"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { ensureModel, type ModelName, modelSpecs } from "../../fixtures/models.js"
import { HttpConfig, type HttpConfigShape } from "../../src/http/HttpConfig.js"
import * as Http from "../../src/http/Server.js"
import { seedDir } from "../../src/internal/PackageFiles.js"
import * as Runtime from "../../src/layers/Runtime.js"
import { Provider } from "../../src/services/Provider.js"
import { Store } from "../../src/services/Store.js"
import { StoreIoError } from "../../src/services/StoreError.js"
import { testChild, testRunEnv } from "../support/engine.js"

export interface SeededOptions {
  readonly http?: Partial<HttpConfigShape>
  /** PEM public keys the store trusts besides the seed's. */
  readonly trustedKeys?: ReadonlyArray<string>
}

const isModelName = (name: string): name is ModelName => Object.hasOwn(modelSpecs, name)

/** The packaged seed's manifests, with the model bytes copied from the test model cache. */
const cachedSeed = {
  dir: seedDir(),
  materialize: (model: string, path: string) =>
    Effect.try({
      try: () => {
        if (!isModelName(model)) throw new Error(`no generator for seed model ${model}`)
        Fs.copyFileSync(ensureModel(model), path)
      },
      catch: (cause) => new StoreIoError({ operation: "copy seed model", path, cause })
    })
}

export const seededServer = (options: SeededOptions = {}) =>
  Effect.gen(function*() {
    const root = yield* Effect.acquireRelease(
      Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "nativegen-http-store-"))),
      (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
    )
    const config: HttpConfigShape = { ...HttpConfig.defaults, listen: { _tag: "Tcp", host: "127.0.0.1", port: 0 }, ...options.http }
    const runtime = Runtime.layer({
      store: { root, trustedKeys: options.trustedKeys ?? [], reapGrace: Duration.zero, seed: cachedSeed },
      admission: { contextCap: { generation: 2048, decision: 1024 }, workspaceReservationBytes: 64 * 1024 * 1024 },
      worker: { child: testChild, childEnv: testRunEnv, prefillChunk: 128, stopTimeout: Duration.seconds(3) }
    })
    const context = yield* Layer.build(Http.layer(config).pipe(Layer.provideMerge(runtime)))
    const { address } = Context.get(context, HttpServerTag.HttpServer)
    if (address._tag !== "TcpAddress") return yield* Effect.dieMessage("the test server listens on TCP")
    return {
      baseUrl: `http://${address.hostname}:${address.port}`,
      provider: Context.get(context, Provider),
      store: Context.get(context, Store),
      root,
      config
    }
  })

/** A running seeded server, as a service: `layer(HttpSeeded.layer(...))(...)` from @effect/vitest. */
export class HttpSeeded extends Context.Tag("test/HttpSeeded")<HttpSeeded, Effect.Effect.Success<ReturnType<typeof seededServer>>>() {
  static readonly layer = (options: SeededOptions = {}) => Layer.scoped(HttpSeeded, seededServer(options))
}
