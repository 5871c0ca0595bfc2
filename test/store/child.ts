/**
 * A separate process for the store's fault and concurrency tests, run as
 * `node <bundle of this file> <mode> <json>` (see `spawnChild` in helpers.ts; running it with
 * `node --import tsx test/store/child.ts` works the same, only slower to start). For crash tests the environment variable
 * NATIVEGEN_TEST_DIE_AT names a step at which this process SIGKILLs itself; it is read only here,
 * by patching node:fs before the store is imported: the store has no fault hooks of its own.
 *
 * Steps: write (a staging write completed), fsync (a staging file fsynced), link (a blob linked
 * into place), dirsync (a blob shard directory fsynced), manifest (a manifest renamed into
 * place), journal-torn (half of a journal line written), journal (a journal line written, not
 * yet fsynced), journal-fsync (a journal line fsynced).
 */
import { createRequire, syncBuiltinESMExports } from "node:module"

type NodeFs = typeof import("node:fs")
const fs: NodeFs = createRequire(import.meta.url)("node:fs")

const die = (): never => {
  process.kill(process.pid, "SIGKILL")
  throw new Error("unreachable")
}

const fdPath = (fd: unknown): string => {
  try {
    return typeof fd === "number" ? fs.readlinkSync(`/proc/self/fd/${fd}`) : ""
  } catch {
    return ""
  }
}

/** A path given as /proc/self/fd/<directory>/<name> (the store works that way), as a plain path. */
const throughFd = (path: string): string => {
  const m = /^\/proc\/self\/fd\/(\d+)\/(.*)$/.exec(path)
  return m === null ? path : `${fdPath(Number(m[1]))}/${m[2]}`
}

type Callback = (...args: Array<unknown>) => void

/** Replaces `fs[name]`; `patch` receives the arguments and the original, and decides. */
const patch = (name: "write" | "fsync" | "link" | "rename", f: (args: Array<unknown>, original: Callback) => void) => {
  const original = Reflect.get(fs, name) as Callback
  Reflect.set(fs, name, (...args: Array<unknown>) => f(args, (...a) => Reflect.apply(original, fs, a)))
}

/** Calls the original, then dies instead of calling back when `when` held for the call. */
const dieAfter = (name: "write" | "fsync" | "link" | "rename", when: (args: Array<unknown>) => boolean) =>
  patch(name, (args, original) => {
    if (!when(args)) return original(...args)
    const cb = args[args.length - 1]
    original(...args.slice(0, -1), (err: unknown) => err ? (cb as Callback)(err) : die())
  })

const links: Array<string> = []
patch("link", (args, original) => {
  const cb = args[args.length - 1] as Callback
  original(...args.slice(0, -1), (err: unknown) => {
    links.push(err ? "exists" : "published")
    cb(err)
  })
})

switch (process.env.NATIVEGEN_TEST_DIE_AT) {
  case "write":
    dieAfter("write", ([fd]) => fdPath(fd).includes("/staging/"))
    break
  case "fsync":
    dieAfter("fsync", ([fd]) => fdPath(fd).includes("/staging/"))
    break
  case "link":
    dieAfter("link", () => true)
    break
  case "dirsync":
    dieAfter("fsync", ([fd]) => /\/blobs\/sha256\/[0-9a-f]{2}$/.test(fdPath(fd)))
    break
  case "manifest":
    dieAfter("rename", ([, to]) => typeof to === "string" && throughFd(to).includes("/manifests/"))
    break
  case "journal-torn":
    patch("write", (args, original) => {
      const [fd, buffer, offset, length] = args
      if (!fdPath(fd).endsWith("/journal.jsonl") || !(buffer instanceof Uint8Array)) return original(...args)
      const o = typeof offset === "number" ? offset : 0
      const n = typeof length === "number" ? length : buffer.length
      fs.writeSync(fd as number, buffer, o, Math.max(1, Math.floor(n / 2)))
      die()
    })
    break
  case "journal":
    dieAfter("write", ([fd]) => fdPath(fd).endsWith("/journal.jsonl"))
    break
  case "journal-fsync":
    dieAfter("fsync", ([fd]) => fdPath(fd).endsWith("/journal.jsonl"))
    break
}
syncBuiltinESMExports()

const [mode = "", json = "{}"] = process.argv.slice(2)
const input: Record<string, unknown> = JSON.parse(json)
const str = (k: string): string => {
  const v = input[k]
  if (typeof v !== "string") throw new Error(`child: ${k} is not a string`)
  return v
}
const num = (k: string): number => {
  const v = input[k]
  if (typeof v !== "number") throw new Error(`child: ${k} is not a number`)
  return v
}

const Effect = await import("effect/Effect")
const Layer = await import("effect/Layer")
const Logger = await import("effect/Logger")
const LogLevel = await import("effect/LogLevel")
const Crypto = await import("node:crypto")
const Store = await import("../../src/services/Store.js")
const Lock = await import("../../src/services/store/Lock.js")
const Journal = await import("../../src/services/store/Journal.js")
const Signing = await import("../../src/services/store/Signing.js")
const { Artifact, Manifest } = await import("../../src/domain/Manifest.js")
const { Digest } = await import("../../src/domain/Digest.js")
const Seed = await import("../../src/services/store/Seed.js")

const storeLayer = (extra: Partial<import("../../src/services/Store.js").StoreConfigShape> = {}) =>
  Store.layer.pipe(Layer.provide(Store.StoreConfig.layer({
    root: str("root"),
    trustedKeys: typeof input.publicPem === "string" ? [input.publicPem] : [],
    trustSeedKey: false,
    ...extra
  })))

const withStore = <A, E>(
  f: (store: import("../../src/services/Store.js").Store["Type"]) => import("effect/Effect").Effect<A, E>,
  extra: Partial<import("../../src/services/Store.js").StoreConfigShape> = {}
) => Effect.flatMap(Store.Store, f).pipe(Effect.provide(storeLayer(extra)))

const programs: Record<string, () => import("effect/Effect").Effect<unknown, unknown>> = {
  /** Stage a file, then activate a signed manifest naming it. */
  "stage-activate": () =>
    withStore((store) =>
      Effect.zipRight(store.stage(str("source"), str("digest"), num("size")), store.activate(str("envelope")))
    ),
  /** Stage a file; prints whether this process's link published it. */
  "stage": () =>
    withStore((store) => store.stage(str("source"), str("digest"), num("size"))).pipe(
      Effect.tap(() => Effect.sync(() => console.log(JSON.stringify({ links }))))
    ),
  /** Import the seed in `seedDir`. */
  "seed": () =>
    withStore((store) => store.importSeed, {
      seed: { dir: str("seedDir"), materialize: Seed.generate },
      trustSeedKey: true
    }),
  /** Append `count` journal entries (revisions of parity `parity`) under the store lock. */
  "journal-append": () =>
    Effect.scoped(Effect.gen(function*() {
      const root = str("root")
      const lock = yield* Lock.make(root)
      const journal = yield* Journal.make(root)
      const manifest = Digest.make(str("digest"))
      for (let i = 0; i < num("count"); i++) {
        yield* lock.withLock(Effect.zipRight(
          journal.read,
          journal.append({
            model: ["a", "b", "c"][i % 3]!,
            role: "generation",
            device: ["cpu", "cuda:0"][(i >> 1) % 2]!,
            manifest,
            revision: 2 * i + num("parity") + 1
          })
        ))
      }
    })),
  /** Activate `count` manifests (revisions of parity `parity`) with rollback allowed. */
  "activate": () =>
    withStore((store) =>
      Effect.gen(function*() {
        const key = Crypto.createPrivateKey(str("privatePem"))
        const models = ["a", "b", "c"]
        const devices = ["cpu", "cuda:0"]
        const artifact = new Artifact({ digest: Digest.make(str("digest")), size: num("size"), mediaType: "x" })
        for (let i = 0; i < num("count"); i++) {
          const manifest = new Manifest({
            name: models[i % 3]!,
            role: "generation",
            revision: 2 * i + num("parity") + 1,
            artifacts: [artifact]
          })
          yield* store.activate(Signing.sign(manifest, key), { allowRollback: true, device: devices[(i >> 1) % 2]! })
        }
      })
    ),
  /** Read-modify-write a counter file `count` times under the store lock (lost updates show a broken lock). */
  "counter": () =>
    Effect.scoped(Effect.gen(function*() {
      const lock = yield* Lock.make(str("root"))
      const file = str("counter")
      for (let i = 0; i < num("count"); i++) {
        yield* lock.withLock(Effect.gen(function*() {
          const value = Number(fs.readFileSync(file, "utf8"))
          yield* Effect.yieldNow()
          fs.writeFileSync(file, String(value + 1))
        }))
      }
    })),
  /** Take a lease, say so, and wait for stdin to close. */
  "lease": () =>
    withStore((store) =>
      Effect.scoped(Effect.gen(function*() {
        yield* store.lease(str("digest"))
        console.log("leased")
        yield* Effect.async<void>((resume) => {
          process.stdin.on("end", () => resume(Effect.void))
          process.stdin.on("close", () => resume(Effect.void))
          process.stdin.resume()
        })
      }))
    )
}

const program = programs[mode]
if (program === undefined) throw new Error(`child: unknown mode ${mode}`)
Effect.runPromiseExit(program().pipe(Logger.withMinimumLogLevel(LogLevel.Warning))).then((exit) => {
  if (exit._tag === "Failure") {
    console.error(String(exit.cause))
    process.exit(3)
  }
  process.exit(0)
})
