/**
 * The web console: `GET /` is its page, `GET /console/<file>` its style sheet and ES modules.
 * Plain HTML, CSS and JavaScript with no build step and nothing fetched from elsewhere, each file
 * the text of a TypeScript module under `console/` (so `tsc` ships them in `dist/`). The console
 * reads only the public HTTP API (`/nativegen/*`, `/v1/chat/completions`) and sends the API key
 * it asks for when the server wants one.
 *
 * Served with a content security policy that allows only this origin's scripts, styles and
 * connections, no framing, and no sniffing of types.
 */
import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import * as HttpRouter from "@effect/platform/HttpRouter"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Effect from "effect/Effect"
import type { Asset } from "./console/Asset.js"
import { assets, page } from "./console/Assets.js"
import * as ErrorBodies from "./ErrorBodies.js"

const securityHeaders = {
  "content-security-policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "cache-control": "no-cache"
}

const serve = (asset: Asset) => HttpServerResponse.text(asset.text, { contentType: asset.contentType, headers: securityHeaders })

const byName = new Map(assets.map((asset) => [asset.name, asset]))

/** The console's paths: its page and its files (served without the API key: see Gate). */
export const paths: ReadonlyArray<string> = ["/", ...assets.map((asset) => `/console/${asset.name}`)]

export const routes = HttpLayerRouter.addAll([
  HttpLayerRouter.route("GET", "/", Effect.succeed(serve(page))),
  HttpLayerRouter.route(
    "GET",
    "/console/:file",
    Effect.map(HttpRouter.params, ({ file }) => {
      const asset = file === undefined ? undefined : byName.get(file)
      return asset === undefined
        ? ErrorBodies.openAi({
          status: 404,
          type: "not_found_error",
          code: "not_found",
          param: null,
          message: `the console has no file ${JSON.stringify(file ?? "")}`
        })
        : serve(asset)
    })
  )
])
