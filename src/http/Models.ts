/**
 * The model store under `/nativegen/models` (errors in OpenAI's shape), for the console's Models
 * page: `GET /nativegen/models` lists the active models (revision, signer, artifacts, which role
 * runs each now), the activations passed over and every blob; `POST
 * /nativegen/models/{name}/verify` re-hashes the artifacts of the model's active revisions (a
 * corrupt blob is quarantined by the store, as `nativegen store verify` does).
 *
 * The store is optional: a server whose runtime loads its models by path has none, and these
 * routes then answer 404 `store_unavailable`.
 */
import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import * as HttpRouter from "@effect/platform/HttpRouter"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import type { ActiveModel } from "../domain/StoreResults.js"
import { Provider } from "../services/Provider.js"
import { Store } from "../services/Store.js"
import * as ErrorBodies from "./ErrorBodies.js"
import type { Refusal } from "./Refusals.js"

const noStore: Refusal = {
  status: 404,
  type: "not_found_error",
  code: "store_unavailable",
  param: null,
  message: "this server runs its models by path: it has no model store"
}

const storeFailed = (error: { readonly _tag: string; readonly message: string }): Refusal => ({
  status: 500,
  type: "server_error",
  code: "store_error",
  param: null,
  message: `${error._tag}: ${error.message}`
})

/** An active model as the console shows it; blob paths stay on the server. */
const describe = (model: ActiveModel, runningAs: ReadonlyArray<string>) => ({
  model: model.model,
  role: model.role,
  device: model.device,
  revision: model.revision,
  manifestDigest: model.manifestDigest,
  signer: model.keyId,
  activatedAt: model.activatedAt,
  journalLine: model.journalLine,
  /** The roles the engine runs this exact revision for now. */
  running: runningAs,
  artifacts: model.artifacts.map((a) => ({ digest: a.digest, size: a.size, mediaType: a.mediaType }))
})

export const routes = HttpLayerRouter.addAll(Effect.gen(function*() {
  const provider = yield* Provider
  const store = yield* Effect.serviceOption(Store)

  const list = Option.match(store, {
    onNone: () => Effect.succeed(ErrorBodies.openAi(noStore)),
    onSome: (store) =>
      Effect.gen(function*() {
        const listing = yield* Effect.either(store.list)
        if (Either.isLeft(listing)) return ErrorBodies.openAi(storeFailed(listing.left))
        const { roles } = yield* provider.readiness
        const runningAs = (model: ActiveModel) => roles.filter((r) => r.manifestDigest === model.manifestDigest).map((r) => r.role)
        return HttpServerResponse.unsafeJson({
          object: "nativegen.models",
          active: listing.right.active.map((m) => describe(m, runningAs(m))),
          passedOver: listing.right.passedOver,
          blobs: listing.right.blobs
        })
      })
  })

  const verify = Option.match(store, {
    onNone: () => Effect.succeed(ErrorBodies.openAi(noStore)),
    onSome: (store) =>
      Effect.gen(function*() {
        const name = (yield* HttpRouter.params)["name"] ?? ""
        const listing = yield* Effect.either(store.list)
        if (Either.isLeft(listing)) return ErrorBodies.openAi(storeFailed(listing.left))
        const revisions = listing.right.active.filter((m) => m.model === name)
        if (revisions.length === 0) {
          const names = [...new Set(listing.right.active.map((m) => m.model))].join(", ")
          return ErrorBodies.openAi({
            status: 404,
            type: "not_found_error",
            code: "model_not_found",
            param: "name",
            message: `no active model is named ${JSON.stringify(name)} (active: ${names === "" ? "none" : names})`
          })
        }
        const checked = yield* Effect.forEach(revisions, (m) =>
          Effect.map(
            Effect.forEach(m.artifacts, (a) =>
              Effect.map(Effect.either(store.verify(a.digest)), (result) =>
                Either.match(result, {
                  onLeft: (error) => ({ digest: a.digest, size: a.size, ok: false, error: error._tag, message: error.message }),
                  onRight: () => ({ digest: a.digest, size: a.size, ok: true })
                }))),
            (artifacts) => ({
              device: m.device,
              revision: m.revision,
              manifestDigest: m.manifestDigest,
              signer: m.keyId,
              ok: artifacts.every((a) => a.ok),
              artifacts
            })
          ))
        return HttpServerResponse.unsafeJson({
          object: "nativegen.verification",
          model: name,
          ok: checked.every((r) => r.ok),
          revisions: checked
        })
      })
  })

  return [
    HttpLayerRouter.route("GET", "/nativegen/models", list),
    HttpLayerRouter.route("POST", "/nativegen/models/:name/verify", verify)
  ]
}))
