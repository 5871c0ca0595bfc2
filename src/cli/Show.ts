/**
 * `nativegen show [MODEL]`: per role (or for the model named), what the model is: architecture,
 * parameters, quantization, trained context, chat template and license from its GGUF header
 * (read here, on the host), its manifest digest, revision and signer from the store, and, when a
 * server runs, the context it admitted. It works on the store directly when no server runs (as
 * `store list` does). Where the server runs something other than what the store now has active
 * (a newer revision activated, a model removed), both are shown and the difference is said.
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type { Readiness } from "../domain/Inference.js"
import { ggufMediaType, type Role } from "../domain/Manifest.js"
import type { ActiveModel, Listing } from "../rpc/Api.js"
import { CliUsageError } from "./CliError.js"
import * as Flags from "./Flags.js"
import * as Format from "./Format.js"
import * as ModelFacts from "./ModelFacts.js"
import { storeFlags } from "./Serve.js"
import { withStore } from "./StoreAccess.js"
import * as Terminal from "./Terminal.js"
import * as Width from "./Width.js"

type LoadedRole = Readiness["roles"][number]

/** One model to show: what the server runs for a role, what the store has active, or both. */
export interface Subject {
  readonly role: Role
  /** The role as the running server has it loaded; undefined when no server runs or it has not loaded this model. */
  readonly loaded: LoadedRole | undefined
  /** The store's active manifest of this model (the one loaded, when the server runs it); undefined when there is none. */
  readonly stored: ActiveModel | undefined
  /** The store's newest activation for the role when it is another model than the one shown (a start loads it first). */
  readonly next: ActiveModel | undefined
}

const roles: ReadonlyArray<Role> = ["generation", "decision"]

/** The store's model for a role: its newest activation (what a start would load first). */
const storedFor = (listing: Listing, role: Role): ActiveModel | undefined =>
  listing.active.filter((m) => m.role === role).reduce<ActiveModel | undefined>(
    (newest, m) => (newest === undefined || m.journalLine > newest.journalLine ? m : newest),
    undefined
  )

/** The store's activation of what the server runs: by manifest, else the model's active revision. */
const storedOf = (listing: Listing, loaded: LoadedRole): ActiveModel | undefined =>
  listing.active.find((m) => m.manifestDigest === loaded.manifestDigest) ??
    listing.active.find((m) => m.model === loaded.model && m.role === loaded.role)

const subjectOf = (listing: Listing, role: Role, loaded: LoadedRole | undefined, stored: ActiveModel | undefined): Subject => {
  const newest = storedFor(listing, role)
  const shownModel = loaded?.model ?? stored?.model
  return { role, loaded, stored, next: newest !== undefined && newest.model !== shownModel ? newest : undefined }
}

/**
 * What to show: per role, the model the server runs (else the store's newest activation for the
 * role); or, for a named model, its activation and the server's roles that run it. Empty when
 * nothing matches.
 */
export const subjects = (listing: Listing, readiness: Option.Option<Readiness>, model: Option.Option<string>): Array<Subject> => {
  const loadedRoles = Option.match(readiness, { onNone: () => [], onSome: (r) => r.roles })
  return Option.match(model, {
    onNone: () =>
      roles.flatMap((role) => {
        const loaded = loadedRoles.find((r) => r.role === role)
        const stored = loaded === undefined ? storedFor(listing, role) : storedOf(listing, loaded)
        return loaded === undefined && stored === undefined ? [] : [subjectOf(listing, role, loaded, stored)]
      }),
    onSome: (name) => {
      const loaded = loadedRoles.filter((r) => r.model === name)
      if (loaded.length > 0) return loaded.map((l) => subjectOf(listing, l.role, l, storedOf(listing, l)))
      const stored = listing.active.find((m) => m.model === name)
      return stored === undefined ? [] : [subjectOf(listing, stored.role, undefined, stored)]
    }
  })
}

/** The GGUF file to read: what the server runs, else the store's active artifact. */
const modelPath = (subject: Subject): string | undefined =>
  subject.loaded?.modelPath ?? subject.stored?.artifacts.find((a) => a.mediaType === ggufMediaType)?.path ??
    subject.stored?.artifacts[0]?.path

/** Everything `show` says about one model. */
export interface Shown {
  readonly role: Role
  readonly model: string
  readonly revision: number | null
  readonly manifestDigest: string | null
  readonly keyId: string | null
  readonly architecture: string
  readonly parameters: number
  readonly quantization: string
  readonly fileType: number | null
  readonly trainedContext: number | null
  /** Only when a server runs and has the model loaded. */
  readonly admittedContext?: number | null
  readonly contextCap?: number | null
  readonly limitedBy?: string | null
  readonly license: string | null
  readonly chatTemplate: string | null
  readonly loadedByServer: boolean
  readonly activeInStore: boolean
  /** Where the server and the store differ, in words. */
  readonly notes: ReadonlyArray<string>
}

const notesOf = (subject: Subject, serverRuns: boolean): Array<string> => {
  const { loaded, next, role, stored } = subject
  const notes: Array<string> = []
  if (loaded === undefined && serverRuns) {
    notes.push(`active in the store; the running server does not run it for ${role}`)
  }
  if (loaded !== undefined && stored === undefined) {
    notes.push(`the server runs it for ${role}, but it is no longer active in the store (it stays loaded until the server restarts)`)
  }
  if (loaded !== undefined && stored !== undefined && loaded.manifestDigest !== stored.manifestDigest) {
    notes.push(
      `the server runs revision ${loaded.revision ?? "-"}; the store's active revision is ${stored.revision} (loaded at the server's next start)`
    )
  }
  if (next !== undefined) {
    notes.push(
      `the store's newest model for ${role} is ${next.model} revision ${next.revision}: ${serverRuns ? "the server's next start loads" : "a start loads"} it first`
    )
  }
  return notes
}

export const describe = (subject: Subject, facts: ModelFacts.ModelFacts, serverRuns: boolean): Shown => {
  const { loaded, stored } = subject
  // What runs decides; the store's values stand where the server runs nothing (or the same manifest).
  const same = loaded === undefined || stored === undefined || loaded.manifestDigest === stored.manifestDigest
  return {
    role: subject.role,
    model: loaded?.model ?? stored?.model ?? "-",
    revision: loaded?.revision ?? stored?.revision ?? null,
    manifestDigest: loaded?.manifestDigest ?? stored?.manifestDigest ?? null,
    keyId: same ? stored?.keyId ?? null : null,
    architecture: facts.architecture,
    parameters: facts.parameterCount,
    quantization: facts.quantization,
    fileType: facts.fileType,
    trainedContext: facts.trainedContext,
    ...(loaded === undefined
      ? {}
      : { admittedContext: loaded.admittedContext, contextCap: loaded.contextCap, limitedBy: loaded.limitedBy }),
    license: facts.license,
    chatTemplate: facts.chatTemplate,
    loadedByServer: loaded !== undefined,
    activeInStore: stored !== undefined,
    notes: notesOf(subject, serverRuns)
  }
}

const templateLines = 6

/** The readable text of one model. `template`: the whole chat template instead of its first lines. */
export const shownText = (shown: Shown, options: { readonly style: Format.Style; readonly template: boolean; readonly maxWidth?: number | undefined }): string => {
  const field = (name: string, value: string) => `  ${name.padEnd(17)} ${value}`
  const lines = [
    `${Format.bold(options.style)(shown.model)} (${shown.role})`,
    field("architecture", shown.architecture),
    field("parameters", ModelFacts.formatParameters(shown.parameters)),
    field("quantization", shown.quantization),
    field("trained context", shown.trainedContext === null ? "-" : String(shown.trainedContext))
  ]
  if (shown.admittedContext !== undefined) {
    const why = shown.contextCap === null || shown.contextCap === undefined
      ? ""
      : ` (cap ${shown.contextCap}${shown.limitedBy === null || shown.limitedBy === undefined ? "" : `, limited by ${shown.limitedBy}`})`
    lines.push(field("admitted context", `${shown.admittedContext ?? "-"}${why}`))
  }
  lines.push(
    field("license", shown.license ?? "-"),
    field("manifest", shown.manifestDigest === null ? "- (loaded by path)" : `${shown.manifestDigest} (revision ${shown.revision ?? "-"})`),
    field("signed by", shown.keyId ?? "-"),
    field("loaded", shown.loadedByServer ? "yes, by the running server" : "no"),
    ...shown.notes.map((note) => field("note", note))
  )
  const template = shown.chatTemplate === null ? ["-"] : shown.chatTemplate.split("\n")
  const kept = options.template ? template : template.slice(0, templateLines)
  kept.forEach((line, i) => lines.push(field(i === 0 ? "template" : "", line)))
  if (kept.length < template.length) {
    lines.push(field("", Format.dim(options.style)(`… ${template.length - kept.length} more lines (--template shows them all)`)))
  }
  return Width.fitLines(lines.join("\n"), options.maxWidth)
}

export const options = {
  socket: Flags.socket,
  json: Flags.json,
  template: Options.boolean("template").pipe(Options.withDescription("Print the whole chat template (--json always has it)")),
  ...storeFlags
}

export const args = {
  model: Args.text({ name: "model" }).pipe(Args.withDescription("A model's name (default: the model of each role)"), Args.optional)
}

export const command = Command.make("show", { ...options, ...args }, (settings) =>
  withStore(settings)((store) =>
    Effect.gen(function*() {
      const listing = yield* store.list
      const readiness = yield* store.readiness
      const chosen = subjects(listing, readiness, settings.model)
      if (chosen.length === 0) {
        return yield* Effect.fail(
          new CliUsageError({
            reason: Option.match(settings.model, {
              onNone: () => "no model is active (see `nativegen list`)",
              onSome: (name) => `no active model is named ${JSON.stringify(name)} (see \`nativegen list\`)`
            })
          })
        )
      }
      const shown: Array<Shown> = []
      for (const subject of chosen) {
        const path = modelPath(subject)
        if (path === undefined) continue
        shown.push(describe(subject, yield* ModelFacts.read(path), Option.isSome(readiness)))
      }
      if (settings.json) return yield* Console.log(JSON.stringify(shown, null, 2))
      const style = Terminal.stdoutStyle()
      yield* Console.log(shown.map((s) => shownText(s, { style, template: settings.template, maxWidth: Terminal.stdoutColumns() })).join("\n\n"))
    })
  )).pipe(
    Command.withDescription(
      "Show each active model (or the one named): architecture, parameters, quantization, contexts, template, license, manifest and signer"
    )
  )
