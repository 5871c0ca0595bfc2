/**
 * nativegen's own read-only view of the runtime under `/nativegen/` (errors in OpenAI's shape),
 * what the web console reads and scripts may too:
 * - `GET /nativegen/status`: the readiness (engine, budget by kind, roles, lanes, recovery
 *   actions, the last generations' timings), the server's version and whether a store backs it.
 * - `GET /nativegen/events`: the same as server-sent events, each the status with a `type`:
 *   `readiness` on every engine state change (the current one first), `sample` every `interval`
 *   milliseconds (default 1000) for what changes without one (lanes, memory, finished
 *   generations).
 * - `POST /nativegen/decide`: the decision model's labels and probability per head.
 */
import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import { absurd } from "effect/Function"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import { DecideRequest } from "../domain/Inference.js"
import { packageVersion } from "../internal/PackageFiles.js"
import { Provider } from "../services/Provider.js"
import { Store } from "../services/Store.js"
import * as ErrorBodies from "./ErrorBodies.js"
import * as EventStream from "./EventStream.js"
import { HttpConfig } from "./HttpConfig.js"
import * as JsonBody from "./JsonBody.js"
import { badRequest, refusalOf } from "./Refusals.js"

/** Bounds of the `interval` query parameter of `/nativegen/events`, in milliseconds. */
export const SAMPLE_INTERVAL = { min: 250, max: 60_000, default: 1_000 } as const

const Interval = Schema.NumberFromString.pipe(
  Schema.int(),
  Schema.between(SAMPLE_INTERVAL.min, SAMPLE_INTERVAL.max)
)

export const routes = HttpLayerRouter.addAll(Effect.gen(function*() {
  const provider = yield* Provider
  const { retryAfterSeconds } = yield* HttpConfig
  const store = Option.isSome(yield* Effect.serviceOption(Store))
  const version = packageVersion()

  const status = Effect.gen(function*() {
    const readiness = yield* provider.readiness
    const now = yield* Clock.currentTimeMillis
    return { object: "nativegen.status", time: new Date(now).toISOString(), version, store, readiness }
  })

  const events = Effect.gen(function*() {
    const query = (yield* HttpServerRequest.ParsedSearchParams)["interval"]
    const interval = query === undefined
      ? Either.right(SAMPLE_INTERVAL.default)
      : Schema.decodeUnknownEither(Interval)(query)
    if (Either.isLeft(interval)) {
      return ErrorBodies.openAi(badRequest(`interval must be an integer from ${SAMPLE_INTERVAL.min} to ${SAMPLE_INTERVAL.max} (milliseconds)`, "interval"))
    }
    const changes = Stream.mapEffect(provider.readinessChanges, () => Effect.map(status, (s) => ({ type: "readiness", ...s })))
    const samples = Stream.fromSchedule(Schedule.spaced(Duration.millis(interval.right))).pipe(
      Stream.mapEffect(() => Effect.map(status, (s) => ({ type: "sample", ...s })))
    )
    return EventStream.serverSentEvents(Stream.merge(changes, samples), { onFailure: absurd, endMarker: false })
  })

  const decide = Effect.flatMap(JsonBody.readJson(DecideRequest), provider.decide).pipe(
    Effect.match({
      onFailure: (error) => ErrorBodies.openAi(error._tag === "BodyRefused" ? error.refusal : refusalOf(error, retryAfterSeconds)),
      onSuccess: (result) => HttpServerResponse.unsafeJson({ object: "nativegen.decision", ...result })
    })
  )

  return [
    HttpLayerRouter.route("GET", "/nativegen/status", Effect.map(status, (body) => HttpServerResponse.unsafeJson(body))),
    HttpLayerRouter.route("GET", "/nativegen/events", events),
    HttpLayerRouter.route("POST", "/nativegen/decide", decide)
  ]
}))
