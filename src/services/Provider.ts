/**
 * Provider: the public Effect API of the runtime. Embedders, the RPC server and the command line
 * call only this. `generate` streams channel-tagged text and ends with usage, timings, the stop
 * reason and a checkpoint; `decide` scores labels on the decision model; `count` gives exact token
 * counts through the chat template; `prepare` prefills a conversation's expected prompt while the
 * engine is idle; `readiness` reports the engine, the device budget and the admitted contexts.
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import type * as Stream from "effect/Stream"
import type {
  CountRequest,
  CountResult,
  DecideRequest,
  DecideResult,
  GenerateChunk,
  GenerateRequest,
  PrepareRequest,
  PrepareResult,
  Readiness
} from "../domain/Inference.js"
import type { ProviderError } from "./ProviderError.js"

export class Provider extends Context.Tag("nativegen/Provider")<Provider, {
  /** Streams a generation: Text chunks (per channel), then one Done chunk. Interrupt to cancel. */
  readonly generate: (request: GenerateRequest) => Stream.Stream<GenerateChunk, ProviderError>
  /** Per head, each label's probability and rank, from the decision model. */
  readonly decide: (request: DecideRequest) => Effect.Effect<DecideResult, ProviderError>
  /** Exact token count through the role model's chat template. */
  readonly count: (request: CountRequest) => Effect.Effect<CountResult, ProviderError>
  /** Prefills a conversation's expected prompt in the preparation lane. */
  readonly prepare: (request: PrepareRequest) => Effect.Effect<PrepareResult, ProviderError>
  readonly readiness: Effect.Effect<Readiness>
  /** Readiness whenever the engine state changes (the current one first). */
  readonly readinessChanges: Stream.Stream<Readiness>
}>() {}
