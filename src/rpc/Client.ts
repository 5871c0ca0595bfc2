/**
 * The typed client: a layer that connects to a nativegen server's socket and offers the same
 * `Provider` as the embedded runtime (so an application can swap one for the other), plus
 * `RemoteStore` for the store operations.
 *
 * The remote Provider keeps the Provider's types: every ProviderError arrives as itself, and what
 * only a remote call can meet is mapped onto the nearest ProviderError, naming the socket:
 * a refusal of the RPC layer (`TooManyConnections`, `TooManyRequests`, a closing notice) or a
 * failed connection is `EngineUnavailable`; a lost connection after a generation delivered tokens
 * is `GenerationFailed` (nothing is replayed); a request over the server's message limits is
 * `InvalidRequest`. Readiness cannot fail: an unreachable server reads as state `failed` with the
 * reason. `RemoteStore` keeps the RPC layer's refusals (`RpcLimitError`) next to the store's
 * errors, and a failed connection is `RemoteUnavailable`.
 *
 * Building the layer connects and makes a first call (Readiness): no answer is a `ConnectError`
 * with the reason (no socket, nobody listening, permission denied). Interrupting a call
 * interrupts it on the server. After the connection is lost (an idle close, a server restart),
 * calls wait for a new one for at most `reconnectTimeout` and then go through (see
 * `ClientProtocol`).
 */
import * as RpcClient from "@effect/rpc/RpcClient"
import type { RpcClientError } from "@effect/rpc/RpcClientError"
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as ExecutionStrategy from "effect/ExecutionStrategy"
import * as Exit from "effect/Exit"
import * as FiberId from "effect/FiberId"
import * as Layer from "effect/Layer"
import * as Mailbox from "effect/Mailbox"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as Path from "node:path"
import { EngineUnavailable, GenerationFailed } from "../domain/EngineError.js"
import type { Readiness } from "../domain/Inference.js"
import { Provider } from "../services/Provider.js"
import { InvalidRequest, type ProviderError } from "../services/ProviderError.js"
import type { StoreError } from "../services/StoreError.js"
import type { Activation, Deactivation, ImportEvent, ImportRequest, Listing, ReapReport, VerifiedBlob } from "./Api.js"
import { NativegenRpcs } from "./Api.js"
import * as ClientProtocol from "./ClientProtocol.js"
import { ConnectError, RemoteUnavailable, type RpcLayerError, type RpcLimitError } from "./RpcError.js"

export { ConnectError, RemoteUnavailable } from "./RpcError.js"

/** What a remote store operation can fail with. */
export type RemoteStoreError = StoreError | RpcLimitError | RemoteUnavailable

/** The model store of a remote server. */
export class RemoteStore extends Context.Tag("nativegen/RemoteStore")<RemoteStore, {
  /** The server's socket. */
  readonly socketPath: string
  /** Every active manifest and every published blob. */
  readonly list: Effect.Effect<Listing, RemoteStoreError>
  /**
   * Imports a model file on the server's machine (`path`, absolute) under a signed manifest:
   * `Verified`, `Progress` while copying, `Staged`, and last `Activated`. Interrupt to cancel.
   */
  readonly import: (request: ImportRequest) => Stream.Stream<ImportEvent, RemoteStoreError>
  /** Re-hashes a published blob (a corrupt one is quarantined on the server). */
  readonly verify: (digest: string) => Effect.Effect<VerifiedBlob, RemoteStoreError>
  /** Activates a signed manifest (its JSON text) whose artifacts are in the store. */
  readonly activate: (
    manifest: string,
    options?: { readonly device?: string; readonly allowRollback?: boolean }
  ) => Effect.Effect<Activation, RemoteStoreError>
  /** Deactivates a model on a device (default: the server's); the server keeps what it loaded until it restarts. */
  readonly deactivate: (model: string, options?: { readonly device?: string }) => Effect.Effect<Deactivation, RemoteStoreError>
  /** Removes unreferenced, unleased blobs older than the grace (default: the server's). */
  readonly reap: (options?: { readonly grace?: Duration.DurationInput }) => Effect.Effect<ReapReport, RemoteStoreError>
}>() {}

export type NativegenClient = RpcClient.FromGroup<typeof NativegenRpcs, RpcClientError>

const describe = (error: RpcClientError): string => {
  const cause = error.cause instanceof Error ? `: ${error.cause.message}` : ""
  return `${error.message}${cause}`
}

/** The server interrupted the request (it is shutting down): not the caller's interruption. */
const serverInterrupted = "the server interrupted the request (it is shutting down)"

/** The client's own scope closed while the request ran: its calls end, and their readers are told. */
const clientClosed = "the client was closed while the request ran"

/** Turns an interruption that came from the server into a failure; the caller's own interruption stays one. */
const failInterruption = <E>(onInterrupt: () => E) => <A, E1, R>(self: Effect.Effect<A, E1, R>): Effect.Effect<A, E1 | E, R> =>
  Effect.catchAllCause(self, (cause): Effect.Effect<never, E1 | E> =>
    Cause.isInterruptedOnly(cause) ? Effect.fail(onInterrupt()) : Effect.failCause(cause))

const failStreamInterruption = <E>(onInterrupt: () => E) => <A, E1, R>(self: Stream.Stream<A, E1, R>): Stream.Stream<A, E1 | E, R> =>
  Stream.catchAllCause(self, (cause): Stream.Stream<never, E1 | E> =>
    Cause.isInterruptedOnly(cause) ? Stream.fail(onInterrupt()) : Stream.failCause(cause))

/** A readiness that says the server cannot be reached. */
const unreachable = (socketPath: string, reason: string): Readiness => ({
  state: "failed",
  reason: `the nativegen server on ${socketPath} is unreachable: ${reason}`,
  engine: { incarnation: 0, pid: null, backend: null, nodeLlamaCppVersion: null, uptimeMillis: 0 },
  budget: null,
  roles: [],
  scheduler: { running: 0, queued: 0, slots: 0, conversations: 0 },
  recoveryActions: []
})

/** How long a generation's call is left to end on the server after its Done before it is interrupted. */
const afterDoneTimeout = Duration.seconds(30)

/**
 * The Provider over a client of `socketPath` that lives in `clientScope`; `closing` says once that
 * scope is closing (its calls then end interrupted: they fail naming that, not the server).
 */
const makeProvider = (
  client: NativegenClient,
  socketPath: string,
  clientScope: Scope.Scope,
  closing: () => boolean
): Provider["Type"] => {
  const unavailable = (reason: string) => new EngineUnavailable({ reason: `remote server ${socketPath}: ${reason}` })
  const interrupted = () => closing() ? clientClosed : serverInterrupted
  const toProviderError = (error: ProviderError | RpcLayerError | RpcClientError): ProviderError => {
    switch (error._tag) {
      case "MessageTooLarge":
        return new InvalidRequest({
          field: "request",
          value: `of at least ${error.size} bytes encoded`,
          reason: `the server accepts messages of at most ${error.limit} bytes`
        })
      case "MessageTooDeep":
        return new InvalidRequest({
          field: "request",
          value: `nested more than ${error.limit} levels deep`,
          reason: `the server accepts messages nested at most ${error.limit} levels deep`
        })
      case "TooManyConnections":
      case "TooManyRequests":
      case "TooManyPendingConnections":
      case "FirstMessageTimeout":
      case "IdleTimeout":
      case "AckTimeout":
        return unavailable(error.message)
      case "ConnectionFailed":
        return unavailable(error.reason)
      case "RpcClientError":
        return unavailable(describe(error))
      default:
        return error
    }
  }
  /**
   * Generations that ended at Done whose calls still end on the server (their Exit not read yet):
   * the server counts them in flight until then. A request refused for the in-flight limit while
   * any is finishing waits for them and is sent once more, so a slot frees when a stream ends, as
   * the caller sees it.
   */
  const finishing = new Set<Deferred.Deferred<void>>()
  const afterFinishing = <A, E extends { readonly _tag: string }>(self: Effect.Effect<A, E>) =>
    Effect.catchIf(
      self,
      (error) => error._tag === "TooManyRequests" && finishing.size > 0,
      () => Effect.zipRight(Effect.forEach([...finishing], Deferred.await, { discard: true }), self)
    )
  const call = <A>(self: Effect.Effect<A, ProviderError | RpcLayerError | RpcClientError>) =>
    afterFinishing(self).pipe(Effect.mapError(toProviderError), failInterruption(() => unavailable(interrupted())))

  const reasonOf = (cause: Cause.Cause<RpcLayerError | RpcClientError>): string => {
    const failure = Cause.failureOption(cause)
    if (failure._tag === "Some") {
      const error = failure.value
      return error._tag === "RpcClientError" ? describe(error) : error._tag === "ConnectionFailed" ? error.reason : error.message
    }
    return Cause.isInterruptedOnly(cause) ? serverInterrupted : Cause.pretty(cause)
  }

  /** Subscribes again after a failure (the client reconnects); one `failed` readiness per outage. */
  const watch = (announced: boolean): Stream.Stream<Readiness> =>
    Stream.suspend(() => {
      let received = false
      return client.WatchReadiness().pipe(
        Stream.tap(() => Effect.sync(() => void (received = true))),
        Stream.catchAllCause((cause) => {
          if (!Cause.isFailure(cause) && !Cause.isInterruptedOnly(cause)) return Stream.die(Cause.squash(cause))
          const announce = received || !announced
          return (announce ? Stream.make(unreachable(socketPath, reasonOf(cause))) : Stream.empty).pipe(
            Stream.concat(Stream.execute(Effect.sleep(Duration.seconds(1)))),
            Stream.concat(watch(true))
          )
        })
      )
    })

  return Provider.of({
    generate: (request) =>
      Stream.unwrapScoped(Effect.gen(function*() {
        let delivered = 0
        // The request's call lives in a scope of its own. The stream ends at Done (the last chunk):
        // the caller has its answer while the server still releases what the request held, and the
        // call is left to end there (its Exit is read in the background, in the client's scope)
        // instead of being interrupted. A stream that ends before Done interrupts the call. Not a
        // child of the client's scope: closing that ends the call through the RPC client, which
        // fails the call's chunks for its reader (closing the call's scope first would leave the
        // reader waiting for chunks that never come).
        const call = yield* Scope.make(ExecutionStrategy.sequential)
        let answered = false
        const chunks = yield* Scope.extend(client.Generate(request, { asMailbox: true }), call).pipe(
          Effect.onError(() => Scope.close(call, Exit.void))
        )
        yield* Effect.addFinalizer(() =>
          answered
            ? Effect.suspend(() => {
              const ended = Deferred.unsafeMake<void>(FiberId.none)
              finishing.add(ended)
              return Mailbox.toStream(chunks).pipe(
                Stream.runDrain,
                Effect.ignore,
                Effect.timeoutOption(afterDoneTimeout),
                Effect.ensuring(Scope.close(call, Exit.void)),
                Effect.ensuring(Effect.sync(() => {
                  finishing.delete(ended)
                  Deferred.unsafeDone(ended, Exit.void)
                })),
                Effect.forkIn(clientScope),
                Effect.asVoid
              )
            })
            : Scope.close(call, Exit.void)
        )
        return Mailbox.toStream(chunks).pipe(
          Stream.takeUntil((chunk) => {
            if (chunk._tag === "Done") answered = true
            return answered
          }),
          // Counted per message (a chunk of chunks), not per element: nothing is split or awaited.
          Stream.mapChunks((chunks) => {
            for (const chunk of chunks) if (chunk._tag === "Text") delivered += chunk.tokens.length
            return chunks
          }),
          Stream.mapError((error): ProviderError =>
            (error._tag === "RpcClientError" || error._tag === "ConnectionFailed") && delivered > 0
              ? new GenerationFailed({
                deliveredTokens: delivered,
                reason: `remote server ${socketPath}: ${error._tag === "RpcClientError" ? describe(error) : error.reason}`
              })
              : toProviderError(error)
          ),
          failStreamInterruption(() =>
            delivered > 0
              ? new GenerationFailed({ deliveredTokens: delivered, reason: `remote server ${socketPath}: ${interrupted()}` })
              : unavailable(interrupted())
          )
        )
      })),
    decide: (request) => call(client.Decide(request)),
    count: (request) => call(client.Count(request)),
    tokenize: (request) => call(client.Tokenize(request)),
    prepare: (request) => call(client.Prepare(request)),
    readiness: client.Readiness().pipe(
      Effect.catchAllCause((cause) =>
        Cause.isFailure(cause) || Cause.isInterruptedOnly(cause)
          ? Effect.succeed(unreachable(socketPath, reasonOf(cause)))
          : Effect.die(Cause.squash(cause))
      )
    ),
    readinessChanges: watch(false)
  })
}

/** The RemoteStore over a client of `socketPath`. */
const makeRemoteStore = (client: NativegenClient, socketPath: string): RemoteStore["Type"] => {
  const toError = (error: StoreError | RpcLayerError | RpcClientError): RemoteStoreError =>
    error._tag === "RpcClientError"
      ? new RemoteUnavailable({ socketPath, reason: describe(error) })
      : error._tag === "ConnectionFailed"
      ? new RemoteUnavailable({ socketPath, reason: error.reason })
      : error
  const interrupted = () => new RemoteUnavailable({ socketPath, reason: serverInterrupted })
  const call = <A>(self: Effect.Effect<A, StoreError | RpcLayerError | RpcClientError>) =>
    self.pipe(Effect.mapError(toError), failInterruption(interrupted))
  return RemoteStore.of({
    socketPath,
    list: Effect.suspend(() => call(client.StoreList())),
    import: (request) => client.StoreImport(request).pipe(Stream.mapError(toError), failStreamInterruption(interrupted)),
    verify: (digest) => call(client.StoreVerify({ digest })),
    activate: (manifest, options) => call(client.StoreActivate({ manifest, ...options })),
    deactivate: (model, options) => call(client.StoreDeactivate({ model, ...options })),
    reap: (options) =>
      call(client.StoreReap(options?.grace === undefined ? {} : { graceMillis: Math.round(Duration.toMillis(options.grace)) }))
  })
}

export interface ClientOptions {
  /** The server's socket. */
  readonly socketPath: string
  /**
   * How long a call made while the connection is down (the server restarting, an idle connection
   * closed) waits for a new one before it fails with `EngineUnavailable`/`RemoteUnavailable`
   * naming the socket. Default 30 seconds.
   */
  readonly reconnectTimeout?: Duration.DurationInput | undefined
}

/** How long building the client waits for the server's first answer. */
const connectTimeout = Duration.seconds(10)

export const defaultReconnectTimeout = Duration.seconds(30)

/** The client's keep-alive: a ping unanswered by the next one drops the connection. */
const pingInterval = Duration.seconds(10)

/**
 * A client of the server on `socketPath`; fails with `ConnectError` when no nativegen server
 * answers there (within 10 seconds).
 */
export const make = (options: ClientOptions) =>
  Effect.gen(function*() {
    const socketPath = Path.resolve(options.socketPath)
    const { connect, protocol } = yield* ClientProtocol.make({
      socketPath,
      reconnectTimeout: Duration.decode(options.reconnectTimeout ?? defaultReconnectTimeout),
      pingInterval
    })
    yield* connect.pipe(
      Effect.mapError((failure) => new ConnectError({ socketPath, reason: ClientProtocol.connectReason(failure) }))
    )
    const client: NativegenClient = yield* RpcClient.make(NativegenRpcs, { spanPrefix: "NativegenClient" }).pipe(
      Effect.provideService(RpcClient.Protocol, protocol)
    )
    // A first call: any answer of a nativegen server (a refusal included) means connected.
    yield* client.Readiness().pipe(
      Effect.catchAll((error) =>
        error._tag === "RpcClientError" || error._tag === "ConnectionFailed"
          ? Effect.fail(new ConnectError({ socketPath, reason: error._tag === "ConnectionFailed" ? error.reason : describe(error) }))
          : Effect.void
      ),
      Effect.timeoutFail({
        duration: connectTimeout,
        onTimeout: () => new ConnectError({ socketPath, reason: `no answer within ${Duration.format(connectTimeout)}` })
      })
    )
    return { client, socketPath }
  })

/** Provider and RemoteStore over the server on `options.socketPath`. */
export const layer = (options: ClientOptions): Layer.Layer<Provider | RemoteStore, ConnectError> =>
  Layer.scopedContext(Effect.gen(function*() {
    const { client, socketPath } = yield* make(options)
    // Set as the client closes, before the RPC client's own finalizer ends the calls in flight
    // (added after it, so it runs first).
    let closing = false
    yield* Effect.addFinalizer(() => Effect.sync(() => void (closing = true)))
    return Context.make(Provider, makeProvider(client, socketPath, yield* Effect.scope, () => closing)).pipe(
      Context.add(RemoteStore, makeRemoteStore(client, socketPath))
    )
  }))
