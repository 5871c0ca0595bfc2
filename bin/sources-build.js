// The repository's compiled build of its own sources: `src/cli/main.ts` and `src/native/child.ts`
// bundled by esbuild (with effect and the other pure-JavaScript dependencies; node-llama-cpp and
// fs-native-extensions stay external, and so do the cluster's optional SQL drivers when they are
// not installed) into `.cache/build/<key>/`, where the key is a hash of
// everything the build depends on: every file under `src/` and `fixtures/` (contents and paths), tsconfig.json,
// package.json, the installed dependencies (`node_modules/.package-lock.json`, rewritten by every
// npm install), esbuild's version and this file. A start computes the key from the files as they
// are now (about 1 MB to hash) and runs that build, building it first when there is none, so code
// that differs from the sources is never run. The bundle is built from exactly the bytes that were
// hashed (a plugin serves those files from that snapshot), and a build is written under a temporary name
// and renamed into place, so concurrent starts never see half a build. Used by bin/nativegen.js
// and bin/engine-child.js inside the repository only (not shipped: the installed package runs
// `dist/`); esbuild is a development dependency.
import * as Crypto from "node:crypto"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"

export const projectRoot = Path.resolve(Path.dirname(fileURLToPath(import.meta.url)), "..")
/** What the bundle compiles from the repository (src/services/store/Seed.ts imports fixtures/models.ts). */
const sourceDirs = ["src", "fixtures"].map((dir) => Path.join(projectRoot, dir))
export const buildsDir = Path.join(projectRoot, ".cache", "build")

/** Builds not used for this long are removed when a new one is written (a running server may still spawn children from its own). */
const keepUnused = 24 * 60 * 60 * 1000

const entryPoints = { main: "src/cli/main.ts", child: "src/native/child.ts", probe: "src/native/probe.ts" }
/**
 * The cluster's optional peers: loaded only by `serve --cluster`, so a bundle must build where
 * they are not installed (they are then left to fail at run time, when `--cluster` asks for them).
 */
const optionalPeers = ["@effect/sql-pg", "@effect/sql-libsql", "@libsql/client"]
const installed = (name) => Fs.existsSync(Path.join(projectRoot, "node_modules", name, "package.json"))
const external = ["node-llama-cpp", "fs-native-extensions", ...optionalPeers.filter((name) => !installed(name))]

/** Every file under `dir`, as absolute paths, in a stable order. */
const filesUnder = (dir) =>
  Fs.readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile())
    .map((entry) => Path.join(entry.parentPath ?? entry.path, entry.name))
    .sort()

const readOptional = (file) => {
  try {
    return Fs.readFileSync(file)
  } catch {
    return Buffer.alloc(0)
  }
}

const esbuildVersion = () =>
  JSON.parse(Fs.readFileSync(Path.join(projectRoot, "node_modules", "esbuild", "package.json"), "utf8")).version

/** The sources as they are now (path -> bytes) and the build key they give. */
export const snapshot = () => {
  const sources = new Map(sourceDirs.flatMap(filesUnder).map((file) => [file, Fs.readFileSync(file)]))
  const hash = Crypto.createHash("sha256")
  for (const [file, bytes] of sources) hash.update(`${Path.relative(projectRoot, file)}\0${bytes.length}\0`).update(bytes)
  for (const file of ["tsconfig.json", "package.json", "node_modules/.package-lock.json", "bin/sources-build.js"]) {
    const bytes = readOptional(Path.join(projectRoot, file))
    hash.update(`${file}\0${bytes.length}\0`).update(bytes)
  }
  hash.update(`esbuild ${esbuildVersion()}`)
  return { sources, key: hash.digest("hex").slice(0, 20) }
}

const loaderOf = (file) => (file.endsWith(".json") ? "json" : file.endsWith(".js") ? "js" : "ts")

/** Builds `sources` into `outdir`; fails if the bundle read anything of the repository that the key does not cover. */
const build = async (sources, outdir) => {
  const esbuild = await import("esbuild")
  const escaped = sourceDirs.map((dir) => dir.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("|")
  const result = await esbuild.build({
    absWorkingDir: projectRoot,
    entryPoints,
    outdir,
    bundle: true,
    splitting: true,
    platform: "node",
    format: "esm",
    target: "node20",
    external,
    // Off: nothing reads function or class names (errors and spans are named explicitly), and its
    // `__name` wrappers cost several percent of the host's CPU per request.
    keepNames: false,
    sourcemap: "linked",
    metafile: true,
    logLevel: "error",
    // Bundled CommonJS dependencies call require().
    banner: { js: "import { createRequire as __nativegenRequire } from 'node:module'; const require = __nativegenRequire(import.meta.url);" },
    plugins: [{
      name: "snapshot",
      setup(build) {
        build.onLoad({ filter: new RegExp(`^(${escaped})[/\\\\]`) }, (args) => {
          const contents = sources.get(args.path)
          if (contents === undefined) throw new Error(`${args.path} appeared after the sources were hashed`)
          return { contents, loader: loaderOf(args.path) }
        })
      }
    }]
  })
  const unhashed = Object.keys(result.metafile.inputs)
    .map((input) => Path.resolve(projectRoot, input))
    .filter((input) => !sources.has(input) && !input.split(Path.sep).includes("node_modules"))
  if (unhashed.length > 0) throw new Error(`the build read files outside src/ and fixtures/ that its key does not cover: ${unhashed.join(", ")}`)
}

/** Removes the builds last used more than a day ago, but never `current`. */
const prune = (current) => {
  for (const entry of Fs.readdirSync(buildsDir)) {
    if (entry === current) continue
    const dir = Path.join(buildsDir, entry)
    try {
      if (Date.now() - Fs.statSync(dir).mtimeMs > keepUnused) Fs.rmSync(dir, { recursive: true, force: true })
    } catch {
      // Removed by another process meanwhile.
    }
  }
}

/**
 * The directory of the build of the sources as they are now (`main.js` and `child.js` in it),
 * built first when there is none.
 */
export const currentBuild = async () => {
  const { key, sources } = snapshot()
  const dir = Path.join(buildsDir, key)
  if (Fs.existsSync(dir)) {
    // Marks it used, for pruning.
    const now = new Date()
    Fs.utimesSync(dir, now, now)
    return dir
  }
  Fs.mkdirSync(buildsDir, { recursive: true })
  const temp = Fs.mkdtempSync(Path.join(buildsDir, `.${key}.`))
  try {
    await build(sources, temp)
    Fs.renameSync(temp, dir)
  } catch (error) {
    Fs.rmSync(temp, { recursive: true, force: true })
    // Another process built the same sources first: theirs is as good.
    if (!Fs.existsSync(dir)) throw error
  }
  prune(key)
  return dir
}
