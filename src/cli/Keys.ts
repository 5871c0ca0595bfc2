/**
 * `nativegen keys generate` and `nativegen keys sign`: local key and manifest authoring, no server
 * needed. `generate` makes an ed25519 key pair (`Store.generateKeys`); `sign` hashes a model file
 * and writes the signed manifest that `nativegen store import` takes, for a server that trusts
 * the key (`nativegen serve --trust-key <key>.pub`).
 */
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Args from "@effect/cli/Args"
import * as Config from "effect/Config"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import * as Fs from "node:fs"
import * as Path from "node:path"
import * as Manifest from "../domain/Manifest.js"
import { generateKeys } from "../services/Store.js"
import * as Signing from "../services/store/Signing.js"
import * as FileHash from "../domain/FileHash.js"
import { CliFileError, CliUsageError, reasonOf } from "./CliError.js"
import { formatBytes } from "./Format.js"
import * as Paths from "./Paths.js"
import * as TrustedKeys from "./TrustedKeys.js"

const readText = (path: string) =>
  Effect.try({ try: () => Fs.readFileSync(path, "utf8"), catch: (cause) => new CliFileError({ path, reason: reasonOf(cause) }) })

/** sha256 and size of a file, streamed (model files are gigabytes); interruptible. */
export const hashFile = (path: string): Effect.Effect<{ readonly hex: string; readonly size: number }, CliFileError> =>
  Effect.mapError(FileHash.hashFile(path), (cause) => new CliFileError({ path, reason: reasonOf(cause) }))

const ggufMagic = Buffer.from("GGUF", "ascii")

/** Refuses a file that does not start with the GGUF magic (a likely mix-up of paths). */
const checkGguf = (path: string) =>
  Effect.try({
    try: () => {
      const fd = Fs.openSync(path, "r")
      try {
        const head = Buffer.alloc(4)
        Fs.readSync(fd, head, 0, 4, 0)
        return head.equals(ggufMagic)
      } finally {
        Fs.closeSync(fd)
      }
    },
    catch: (cause) => new CliFileError({ path, reason: reasonOf(cause) })
  }).pipe(
    Effect.filterOrFail((ok) => ok, () => new CliFileError({ path, reason: "not a GGUF file (no GGUF magic)" }))
  )

const defaultKeyDir = Paths.defaultKeyDir

/** The private key to sign with: the given one, else the only `*.key` in the default key directory. */
const resolvePrivateKey = (given: Option.Option<string>) =>
  Option.match(given, {
    onSome: Effect.succeed,
    onNone: () => {
      const dir = defaultKeyDir()
      const keys = Fs.existsSync(dir) ? Fs.readdirSync(dir).filter((f) => f.endsWith(".key")).sort() : []
      return keys.length === 1
        ? Effect.succeed(Path.join(dir, keys[0]!))
        : Effect.fail(
          new CliUsageError({
            reason: keys.length === 0
              ? `no private key in ${dir}: run \`nativegen keys generate\` or pass --key`
              : `${keys.length} private keys in ${dir}: choose one with --key`
          })
        )
    }
  })

const decodeManifest = Schema.decodeUnknownEither(Manifest.Manifest, { errors: "all" })

export interface SignInput {
  readonly modelPath: string
  readonly privateKeyPath: string
  readonly name: string
  readonly role: Manifest.Role
  readonly revision: number
  readonly expiresAt: Option.Option<Date>
  readonly mediaType: string
}

/** Hashes the model and signs its manifest; returns the signed envelope's canonical text and facts. */
export const signModel = (input: SignInput) =>
  Effect.gen(function*() {
    yield* checkGguf(input.modelPath)
    const pem = yield* readText(input.privateKeyPath)
    const privateKey = yield* Either.match(Signing.privateKeyFromPem(pem, input.privateKeyPath), {
      onLeft: (e) => Effect.fail(new CliFileError({ path: input.privateKeyPath, reason: e.message })),
      onRight: Effect.succeed
    })
    const { hex, size } = yield* hashFile(input.modelPath)
    const manifest = yield* Either.match(
      decodeManifest({
        name: input.name,
        role: input.role,
        revision: input.revision,
        artifacts: [{ digest: `sha256:${hex}`, size, mediaType: input.mediaType }],
        ...Option.match(input.expiresAt, { onNone: () => ({}), onSome: (d) => ({ expiresAt: d.toISOString() }) })
      }),
      {
        onLeft: (e) =>
          Effect.fail(
            new CliUsageError({
              reason: `invalid manifest: ${
                ParseResult.ArrayFormatter.formatErrorSync(e)
                  .map((issue) => `${issue.path.join(".")}: ${issue.message}`)
                  .join("; ")
              }`
            })
          ),
        onRight: Effect.succeed
      }
    )
    const signed = Signing.sign(manifest, privateKey)
    return { text: `${Signing.envelopeText(signed)}\n`, keyId: signed.keyId, digest: `sha256:${hex}`, size }
  })

// ---------------------------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------------------------

const generate = Command.make(
  "generate",
  {
    dir: Options.directory("dir").pipe(
      Options.withDescription(`Directory for the key pair (default ${defaultKeyDir()})`),
      Options.optional
    )
  },
  ({ dir }) =>
    Effect.gen(function*() {
      const target = Option.getOrElse(dir, defaultKeyDir)
      const key = yield* generateKeys(target)
      yield* Console.log(`key ${key.keyId}`)
      yield* Console.log(`public key   ${key.publicKeyPath}   (trust it: nativegen keys trust ${key.publicKeyPath})`)
      yield* Console.log(`private key  ${key.privateKeyPath}   (mode 0600; keep it private, never publish it)`)
    })
).pipe(Command.withDescription("Generate an ed25519 key pair for signing model manifests"))

const sign = Command.make(
  "sign",
  {
    model: Args.file({ name: "model.gguf", exists: "yes" }).pipe(Args.withDescription("The GGUF model file to sign")),
    name: Options.text("name").pipe(
      Options.withDescription("Model name: lowercase letters, digits, '.', '_', '-' (1 to 64 characters)")
    ),
    role: Options.choice("role", ["generation", "decision"]).pipe(
      Options.withDescription("What the model is for"),
      Options.withDefault("generation" as const)
    ),
    revision: Options.integer("revision").pipe(
      Options.withDescription("Revision, higher than any revision of this model activated before"),
      Options.withDefault(1)
    ),
    key: Options.file("key", { exists: "yes" }).pipe(
      Options.withDescription(`Private key (default: the only *.key in ${defaultKeyDir()})`),
      Options.optional
    ),
    expires: Options.date("expires").pipe(
      Options.withDescription("After this instant the manifest cannot be activated"),
      Options.optional
    ),
    out: Options.text("out").pipe(
      Options.withDescription("Where to write the signed manifest (default <name>.manifest.json)"),
      Options.optional
    )
  },
  (input) =>
    Effect.gen(function*() {
      const privateKeyPath = yield* resolvePrivateKey(input.key)
      const signed = yield* signModel({
        modelPath: input.model,
        privateKeyPath,
        name: input.name,
        role: input.role,
        revision: input.revision,
        expiresAt: input.expires,
        mediaType: Manifest.ggufMediaType
      })
      const out = Option.getOrElse(input.out, () => `${input.name}.manifest.json`)
      yield* Effect.try({
        try: () => Fs.writeFileSync(out, signed.text, { flag: "w" }),
        catch: (cause) => new CliFileError({ path: out, reason: reasonOf(cause) })
      })
      yield* Console.log(
        `signed ${input.name} revision ${input.revision} (${input.role}, ${formatBytes(signed.size)}, ${signed.digest}) with ${signed.keyId}`
      )
      yield* Console.log(`manifest ${out}`)
    })
).pipe(Command.withDescription("Sign a GGUF model: write the signed manifest that `nativegen store import` takes"))

const trust = Command.make(
  "trust",
  {
    publicKey: Args.file({ name: "key.pub", exists: "yes" }).pipe(Args.withDescription("A PEM ed25519 public key")),
    dir: Options.text("trusted-keys").pipe(
      Options.withDescription(
        `The directory of keys \`nativegen serve\` trusts (env ${Paths.env.trustedKeys}; default ${Paths.defaultTrustedKeysDir()})`
      ),
      Options.withDefault(Paths.defaultTrustedKeysDir()),
      Options.withFallbackConfig(Config.string(Paths.env.trustedKeys))
    )
  },
  ({ dir, publicKey }) =>
    Effect.gen(function*() {
      const trusted = yield* TrustedKeys.trust(publicKey, dir)
      yield* Console.log(
        trusted.alreadyTrusted
          ? `${trusted.keyId} is already trusted (${dir})`
          : `trusted ${trusted.keyId}: ${trusted.path} (a running server trusts it from its next start)`
      )
    })
).pipe(Command.withDescription("Trust a public key: servers started afterwards accept manifests it signed"))

export const command = Command.make("keys").pipe(
  Command.withDescription("Signing keys and manifests (local; no server needed)"),
  Command.withSubcommands([generate, trust, sign])
)
