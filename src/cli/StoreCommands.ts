/**
 * `nativegen store import|list|verify|activate|rm|reap`: the model store (`list`, `ls` and `rm`
 * also at the top level). `import` goes through a
 * running server's RPC client: it sends a signed manifest and the absolute path of a model file
 * on this machine; the server verifies the manifest before copying, and the copy's progress is
 * drawn as a bar with bytes and rate (redrawn in place on a terminal, every tenth otherwise).
 * `list`, `verify`, `activate`, `rm` and `reap` use the server when one listens on the socket, and
 * otherwise work directly on the store (StoreAccess), saying on stderr which they did.
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Console from "effect/Console"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { Activation, Deactivation, ImportEvent, Listing, ReapReport, VerifiedBlob } from "../rpc/Api.js"
import { CliFileError, reasonOf } from "./CliError.js"
import * as Flags from "./Flags.js"
import * as Format from "./Format.js"
import * as Remote from "./Remote.js"
import { storeFlags } from "./Serve.js"
import { withStore } from "./StoreAccess.js"
import * as Terminal from "./Terminal.js"

const device = Options.text("device").pipe(
  Options.withDescription("Device to activate on (default: the server store's device)"),
  Options.optional
)
const allowRollback = Options.boolean("allow-rollback").pipe(
  Options.withDescription("Permit a revision that is not newer than the active one")
)

const readText = (path: string) =>
  Effect.try({ try: () => Fs.readFileSync(path, "utf8"), catch: (cause) => new CliFileError({ path, reason: reasonOf(cause) }) })

const activateOptions = (settings: { readonly device: Option.Option<string>; readonly allowRollback: boolean }) => ({
  ...Option.match(settings.device, { onNone: () => ({}), onSome: (device) => ({ device }) }),
  ...(settings.allowRollback ? { allowRollback: true } : {})
})

const activationLine = (a: Activation) =>
  a.alreadyActive
    ? `${a.model} revision ${a.revision} (${a.role}) on ${a.device} was already active: manifest ${a.manifestDigest}`
    : `activated ${a.model} revision ${a.revision} (${a.role}) on ${a.device}: manifest ${a.manifestDigest}, signed by ${a.keyId}`

// ---------------------------------------------------------------------------------------------
// import
// ---------------------------------------------------------------------------------------------

const encodeEvent = Schema.encodeSync(ImportEvent)

interface ImportView {
  readonly label: string
  readonly started: number
  /** The tenth of the copy last printed (non-terminal output). */
  readonly printedTenth: number
  readonly drawn: boolean
}

/** How an import event is shown: one line per step; progress redrawn in place on a terminal. */
const showEvent = (view: Ref.Ref<ImportView>, event: ImportEvent, tty: boolean) =>
  Effect.gen(function*() {
    const current = yield* Ref.get(view)
    const endLine = current.drawn && tty ? "\n" : ""
    switch (event._tag) {
      case "Verified": {
        yield* Ref.update(view, (v) => ({ ...v, label: event.model }))
        return yield* Terminal.writeError(`verified ${event.model} revision ${event.revision} (${event.role})\n`)
      }
      case "Progress": {
        const line = Format.progressLine({
          label: current.label,
          bytes: event.bytes,
          total: event.total,
          elapsedMillis: event.bytesPerSecond > 0 ? (event.bytes / event.bytesPerSecond) * 1000 : Date.now() - current.started
        }, 24, Terminal.stderrColumns())
        if (tty) {
          yield* Ref.update(view, (v) => ({ ...v, drawn: true }))
          return yield* Terminal.writeError(`\r${line}\x1b[K`)
        }
        const tenth = event.total > 0 ? Math.floor((event.bytes / event.total) * 10) : 0
        if (tenth <= current.printedTenth) return
        yield* Ref.update(view, (v) => ({ ...v, printedTenth: tenth }))
        return yield* Terminal.writeError(`${line}\n`)
      }
      case "Staged": {
        yield* Ref.update(view, (v) => ({ ...v, drawn: false }))
        return yield* Terminal.writeError(`${endLine}staged ${event.digest} (${Format.formatBytes(event.size)})\n`)
      }
      case "Activated": {
        yield* Ref.update(view, (v) => ({ ...v, drawn: false }))
        return yield* Console.log(`${endLine}${activationLine(event.activation)}`)
      }
    }
  })

const importCommand = Command.make(
  "import",
  {
    socket: Flags.socket,
    json: Flags.json,
    manifest: Options.file("manifest", { exists: "yes" }).pipe(
      Options.withAlias("m"),
      Options.withDescription("The signed manifest (from `nativegen keys sign`)")
    ),
    device,
    allowRollback,
    model: Args.file({ name: "model.gguf", exists: "yes" }).pipe(Args.withDescription("The model file the manifest names"))
  },
  (settings) =>
    Effect.gen(function*() {
      const manifest = yield* readText(settings.manifest)
      const remote = yield* Remote.RemoteStore
      const tty = process.stderr.isTTY === true
      const view = yield* Ref.make<ImportView>({ label: Path.basename(settings.model), started: Date.now(), printedTenth: -1, drawn: false })
      yield* remote.import({ manifest, path: Path.resolve(settings.model), ...activateOptions(settings) }).pipe(
        Stream.runForEach((event) =>
          settings.json ? Console.log(JSON.stringify(encodeEvent(event))) : showEvent(view, event, tty)
        )
      )
    }).pipe(Remote.withClient(settings.socket))
).pipe(Command.withDescription("Import a model file with its signed manifest, and activate it"))

// ---------------------------------------------------------------------------------------------
// list, verify, activate, reap
// ---------------------------------------------------------------------------------------------

const encodeListing = Schema.encodeSync(Listing)

/** The listing as tables: the active models, the activations passed over (when any), then the blobs. */
export const listingText = (listing: Listing, maxWidth?: number): string => {
  const active = listing.active.length === 0
    ? "no active models"
    : Format.table(
      ["role", "model", "revision", "device", "manifest", "signed by", "activated"],
      listing.active.map((m) => [
        m.role,
        m.model,
        String(m.revision),
        m.device,
        Format.shortDigest(m.manifestDigest),
        m.keyId,
        m.activatedAt
      ]),
      [false, false, true],
      maxWidth
    )
  const blobs = listing.blobs.length === 0
    ? "no blobs"
    : Format.table(
      ["blob", "size", "referenced", "leased"],
      listing.blobs.map((b) => [b.digest, Format.formatBytes(b.size), b.referenced ? "yes" : "no", b.leased ? "yes" : "no"]),
      [false, true],
      maxWidth
    )
  const passedOver = listing.passedOver.length === 0
    ? []
    : [Format.table(
      ["passed over", "model", "revision", "device", "journal line", "why"],
      listing.passedOver.map((p) => [p.role, p.model, String(p.revision), p.device, String(p.journalLine), p.reason]),
      [false, false, true, false, true],
      maxWidth
    )]
  return [active, ...passedOver, blobs].join("\n\n")
}

/** `store list`, and the same command as `nativegen list` and `nativegen ls`. */
export const listCommand = (name: string) =>
  Command.make(name, { socket: Flags.socket, json: Flags.json, ...storeFlags }, (settings) =>
    withStore(settings)((store) =>
      Effect.gen(function*() {
        const listing = yield* store.list
        yield* Console.log(settings.json ? JSON.stringify(encodeListing(listing), null, 2) : listingText(listing, Terminal.stdoutColumns()))
      })
    )).pipe(
      Command.withDescription(
        "List the active models, the activations passed over and why, and the blobs (directly on the store when no server runs)"
      )
    )

const encodeVerified = Schema.encodeSync(VerifiedBlob)

const verify = Command.make(
  "verify",
  {
    socket: Flags.socket,
    json: Flags.json,
    ...storeFlags,
    digest: Args.text({ name: "digest" }).pipe(Args.withDescription("sha256:<64 hex> of a blob"))
  },
  (settings) =>
    withStore(settings)((store) =>
      Effect.gen(function*() {
        const blob = yield* store.verify(settings.digest)
        yield* Console.log(
          settings.json ? JSON.stringify(encodeVerified(blob)) : `ok ${blob.digest} (${Format.formatBytes(blob.size)})`
        )
      })
    )
).pipe(Command.withDescription("Re-hash a blob; a corrupt one is quarantined"))

const encodeActivation = Schema.encodeSync(Activation)

const activate = Command.make(
  "activate",
  {
    socket: Flags.socket,
    json: Flags.json,
    device,
    allowRollback,
    ...storeFlags,
    manifest: Args.file({ name: "manifest.json", exists: "yes" }).pipe(
      Args.withDescription("A signed manifest whose artifacts are in the store")
    )
  },
  (settings) =>
    withStore(settings)((store) =>
      Effect.gen(function*() {
        const manifest = yield* readText(settings.manifest)
        const activation = yield* store.activate(manifest, activateOptions(settings))
        yield* Console.log(settings.json ? JSON.stringify(encodeActivation(activation)) : activationLine(activation))
      })
    )
).pipe(Command.withDescription("Activate a signed manifest whose artifacts are already in the store"))

const encodeReap = Schema.encodeSync(ReapReport)

const reap = Command.make(
  "reap",
  {
    socket: Flags.socket,
    json: Flags.json,
    ...storeFlags,
    grace: Options.integer("grace-seconds").pipe(
      Options.withDescription("Keep unreferenced blobs younger than this (default: the store's, 10 minutes)"),
      Options.optional
    )
  },
  (settings) =>
    withStore(settings)((store) =>
      Effect.gen(function*() {
        const report = yield* store.reap(
          Option.match(settings.grace, { onNone: () => ({}), onSome: (seconds) => ({ grace: Duration.seconds(seconds) }) })
        )
        if (settings.json) return yield* Console.log(JSON.stringify(encodeReap(report)))
        yield* Console.log(
          `removed ${report.removed.length} blobs (${Format.formatBytes(report.freedBytes)}), kept ${report.kept.length}, ` +
            `${report.staleLeases} stale leases and ${report.staleStaging} stale staging files cleaned`
        )
        for (const digest of report.removed) yield* Console.log(`  removed ${digest}`)
      })
    )
).pipe(Command.withDescription("Remove blobs no active manifest names and no process holds"))

const encodeDeactivation = Schema.encodeSync(Deactivation)

/** What `store rm` prints: what was removed, what reaping may now collect, and what a running server keeps. */
export const deactivationText = (removed: Deactivation, loadedByServer: boolean): string =>
  [
    `removed ${removed.model} revision ${removed.revision} (${removed.roles.join(", ")}) on ${removed.device}: manifest ${removed.manifestDigest}`,
    removed.collectable.length === 0
      ? "no blob to collect (another active model names them)"
      : `collectable by \`nativegen store reap\`: ${removed.collectable.join(", ")}`,
    ...(loadedByServer ? ["the running server keeps it loaded, and its lease on the blobs, until it restarts"] : [])
  ].join("\n")

/** `store rm NAME`, and the same command as `nativegen rm NAME`. */
export const rmCommand = (name: string) =>
  Command.make(
    name,
    {
      socket: Flags.socket,
      json: Flags.json,
      device: Options.text("device").pipe(
        Options.withDescription("Device to deactivate on (default: the store's device)"),
        Options.optional
      ),
      ...storeFlags,
      model: Args.text({ name: "model" }).pipe(Args.withDescription("The model's name, as `list` shows it"))
    },
    (settings) =>
      withStore(settings)((store) =>
        Effect.gen(function*() {
          const removed = yield* store.deactivate(
            settings.model,
            Option.match(settings.device, { onNone: () => ({}), onSome: (device) => ({ device }) })
          )
          const loadedByServer = Option.exists(
            yield* store.readiness,
            (readiness) => readiness.roles.some((role) => role.manifestDigest === removed.manifestDigest)
          )
          yield* Console.log(
            settings.json
              ? JSON.stringify({ ...encodeDeactivation(removed), loadedByServer })
              : deactivationText(removed, loadedByServer)
          )
        })
      )
  ).pipe(
    Command.withDescription(
      "Deactivate a model in every role it is active in; its blobs become collectable by `store reap` (a running server keeps what it loaded until it restarts)"
    )
  )

export const command = Command.make("store").pipe(
  Command.withDescription("The model store: through a running server, or directly when none runs (import needs the server)"),
  Command.withSubcommands([importCommand, listCommand("list"), verify, activate, rmCommand("rm"), reap])
)
