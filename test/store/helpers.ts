/**
 * Test support for the store: scoped temporary directories, a store layer over one, ed25519 keys
 * and signing, random artifacts, and child processes running `test/store/child.ts`.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import * as ChildProcess from "node:child_process"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { Digest } from "../../src/domain/Digest.js"
import { Artifact, Manifest, type Role, type SignedManifest } from "../../src/domain/Manifest.js"
import * as Store from "../../src/services/Store.js"
import * as Signing from "../../src/services/store/Signing.js"

export const here = Path.dirname(fileURLToPath(import.meta.url))
export const projectRoot = Path.resolve(here, "..", "..")

/** A fresh temporary directory, removed when the scope closes. */
export const tempDir: Effect.Effect<string, never, Scope.Scope> = Effect.acquireRelease(
  Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "nativegen-store-"))),
  (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
)

/** An in-memory ed25519 key pair. */
export interface TestKey {
  readonly privateKey: Crypto.KeyObject
  readonly publicPem: string
  readonly keyId: string
}

export const makeKey = (): TestKey => {
  const { privateKey, publicKey } = Crypto.generateKeyPairSync("ed25519")
  return { privateKey, publicPem: publicKey.export({ type: "spki", format: "pem" }).toString(), keyId: Signing.keyIdOf(publicKey) }
}

export const sha256 = (bytes: Uint8Array) => Digest.make(`sha256:${Crypto.createHash("sha256").update(bytes).digest("hex")}`)

/** Deterministic pseudo-random bytes. */
export const bytesOf = (seed: string, size: number): Buffer => {
  const out = Buffer.alloc(size)
  let block = Crypto.createHash("sha256").update(seed).digest()
  for (let i = 0; i < size; i += 32) {
    block.copy(out, i, 0, Math.min(32, size - i))
    block = Crypto.createHash("sha256").update(block).digest()
  }
  return out
}

export const manifestOf = (
  name: string,
  revision: number,
  artifacts: ReadonlyArray<{ readonly digest: Digest; readonly size: number }>,
  options: { readonly role?: Role; readonly expiresAt?: Date } = {}
) =>
  new Manifest({
    name,
    role: options.role ?? "generation",
    revision,
    artifacts: artifacts.map((a) => new Artifact({ digest: a.digest, size: a.size, mediaType: "application/octet-stream" })),
    ...(options.expiresAt === undefined ? {} : { expiresAt: options.expiresAt })
  })

export const signWith = (key: TestKey, manifest: Manifest): SignedManifest => Signing.sign(manifest, key.privateKey)

export const envelope = (key: TestKey, manifest: Manifest): string => Signing.envelopeText(signWith(key, manifest))

/** A store on `root` trusting `keys`, with no reap grace and no seed key unless asked. */
export const storeLayer = (root: string, keys: ReadonlyArray<TestKey>, options: Partial<Store.StoreConfigShape> = {}) =>
  Store.layer.pipe(
    Layer.provide(Store.StoreConfig.layer({
      root,
      trustedKeys: keys.map((k) => k.publicPem),
      trustSeedKey: false,
      reapGrace: Duration.zero,
      ...options
    }))
  )

/** Builds a store in the current scope. */
export const makeStore = (root: string, keys: ReadonlyArray<TestKey>, options: Partial<Store.StoreConfigShape> = {}) =>
  Effect.provide(Store.make, Store.StoreConfig.layer({
    root,
    trustedKeys: keys.map((k) => k.publicPem),
    trustSeedKey: false,
    reapGrace: Duration.zero,
    ...options
  }))

/** Every file (not directory) below `dir`, relative, sorted. */
export const filesUnder = (dir: string): Array<string> => {
  if (!Fs.existsSync(dir)) return []
  const out: Array<string> = []
  const walk = (d: string) => {
    for (const entry of Fs.readdirSync(d, { withFileTypes: true })) {
      const p = Path.join(d, entry.name)
      if (entry.isDirectory()) walk(p)
      else out.push(Path.relative(dir, p))
    }
  }
  walk(dir)
  return out.sort()
}

/** Every entry (files and directories, the latter with a trailing slash) below `dir`, sorted. */
export const treeOf = (dir: string): Array<string> => {
  const out: Array<string> = []
  const walk = (d: string) => {
    for (const entry of Fs.readdirSync(d, { withFileTypes: true })) {
      const p = Path.join(d, entry.name)
      out.push(`${Path.relative(dir, p)}${entry.isDirectory() ? "/" : ""}`)
      if (entry.isDirectory()) walk(p)
    }
  }
  walk(dir)
  return out.sort()
}

/** The outcome of a child process. */
export interface ChildExit {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
  readonly stdout: string
  readonly stderr: string
}

/**
 * `test/store/child.ts` bundled by esbuild (tsx's own compiler) into one ESM file under `.cache/`,
 * named by a hash of its sources and shared by all test workers. A bundled child starts in about
 * 0.4 s; under `node --import tsx` it takes about 2 s, most of it resolving effect's modules
 * through the loader hooks, which would dominate the fault tests on two cores.
 */
let bundled: Promise<string> | undefined
const childBundle = (): Promise<string> => {
  bundled ??= (async () => {
    const esbuild = await import("esbuild")
    const sources = ["src", "fixtures", "test/store"].flatMap((d) =>
      filesUnder(Path.join(projectRoot, d)).filter((f) => f.endsWith(".ts")).map((f) => Path.join(projectRoot, d, f))
    )
    const hash = Crypto.createHash("sha256")
    for (const file of sources.sort()) hash.update(file).update(Fs.readFileSync(file))
    // Directly in .cache/ so that paths the bundle derives from import.meta.url stay in the project.
    const out = Path.join(projectRoot, ".cache", `store-test-child.${hash.digest("hex").slice(0, 16)}.mjs`)
    if (Fs.existsSync(out)) return out
    Fs.mkdirSync(Path.dirname(out), { recursive: true })
    for (const old of Fs.readdirSync(Path.dirname(out))) {
      if (/^store-test-child\.[0-9a-f]{16}\.mjs$/.test(old)) Fs.rmSync(Path.join(Path.dirname(out), old), { force: true })
    }
    const temp = `${out}.${process.pid}.tmp.mjs`
    await esbuild.build({
      entryPoints: [Path.join(here, "child.ts")],
      bundle: true,
      platform: "node",
      format: "esm",
      target: "node20",
      outfile: temp,
      logLevel: "error",
      banner: { js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);" }
    })
    Fs.renameSync(temp, out)
    return out
  })()
  return bundled
}

/** Spawns the child in `mode` (see child.ts) with `input` as JSON on argv. */
export const spawnChild = (
  mode: string,
  input: unknown,
  env: Record<string, string> = {},
  stdin: "ignore" | "pipe" = "ignore"
): Effect.Effect<ChildProcess.ChildProcess> =>
  Effect.map(Effect.promise(childBundle), (script) =>
    ChildProcess.spawn(process.execPath, [script, mode, JSON.stringify(input)], {
      cwd: projectRoot,
      env: { ...process.env, ...env },
      stdio: [stdin, "pipe", "pipe"]
    }))

/**
 * Runs the child in `mode` with `input` and the given environment; resolves when the child has
 * exited (it is killed if the waiting fiber is interrupted).
 */
export const runChild = (mode: string, input: unknown, env: Record<string, string> = {}): Effect.Effect<ChildExit> =>
  Effect.flatMap(spawnChild(mode, input, env), (child) =>
    Effect.async<ChildExit>((resume) => {
      let stdout = ""
      let stderr = ""
      child.stdout?.on("data", (d: Buffer) => stdout += d.toString())
      child.stderr?.on("data", (d: Buffer) => stderr += d.toString())
      child.on("close", (code, signal) => resume(Effect.succeed({ code, signal, stdout, stderr })))
      return Effect.sync(() => child.kill("SIGKILL"))
    }))
