/**
 * Store directories swapped for symlinks while the store works (issue 12, item 9). A helper
 * process exchanges store directories with symlinks to an outside directory in a tight loop
 * (renameat2 RENAME_EXCHANGE, through python3's ctypes) while real imports run: stage a file
 * under a lease, then activate its signed manifest. Nothing outside the root may be created,
 * removed or renamed (decoys there carry the names the store removes), every import either
 * succeeds inside the store or fails with a typed error, and once the swapping stops every import
 * succeeds. Linux only (renameat2, /proc/self/fd); skipped with a message
 * where python3 or renameat2 is missing.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as ChildProcess from "node:child_process"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Digest from "../../src/domain/Digest.js"
import * as Owner from "../../src/services/store/Owner.js"
import { envelope, filesUnder, makeKey, makeStore, manifestOf, sha256, tempDir, treeOf } from "./helpers.js"

/**
 * argv: seconds, then pairs of paths. Exchanges every pair once per round until the time is up,
 * then finishes the round count even so that every pair ends as it began; prints "ready" before
 * the first swap and the number of rounds at the end.
 */
const swapper = `
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
renameat2 = getattr(libc, "renameat2", None)
if renameat2 is None:
    sys.exit("libc has no renameat2")
AT_FDCWD, RENAME_EXCHANGE = -100, 2
pairs = [(a.encode(), b.encode()) for a, b in zip(sys.argv[2::2], sys.argv[3::2])]
def round_():
    for a, b in pairs:
        if renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) != 0:
            sys.exit("renameat2 %s %s: %s" % (a, b, os.strerror(ctypes.get_errno())))
deadline = time.monotonic() + float(sys.argv[1])
rounds = 0
print("ready", flush=True)
while time.monotonic() < deadline or rounds % 2 == 1:
    round_()
    rounds += 1
print(rounds, flush=True)
`

/** Why the swap test cannot run here, or undefined when it can. */
const unavailable = ((): string | undefined => {
  if (process.platform !== "linux") return "needs Linux (renameat2 and /proc/self/fd)"
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "nativegen-swap-probe-"))
  try {
    Fs.mkdirSync(Path.join(dir, "d"))
    Fs.symlinkSync(dir, Path.join(dir, "l"))
    const probe = ChildProcess.spawnSync("python3", ["-c", swapper, "0", Path.join(dir, "d"), Path.join(dir, "l")], { encoding: "utf8" })
    if (probe.error !== undefined) return `python3 is not available (${probe.error.message})`
    return probe.status === 0 ? undefined : `the renameat2 helper failed: ${probe.stderr.trim()}`
  } finally {
    Fs.rmSync(dir, { recursive: true, force: true })
  }
})()
if (unavailable !== undefined) console.warn(`store swap test skipped: ${unavailable}`)


/** `count` distinct 1 KiB contents whose digests all start with `shard`, so they share a shard directory. */
const contentsInShard = (shard: string, count: number): Array<Buffer> => {
  const out: Array<Buffer> = []
  const base = Crypto.randomBytes(1024)
  for (let nonce = 0; out.length < count; nonce++) {
    base.writeUInt32BE(nonce, 0)
    if (Crypto.createHash("sha256").update(base).digest("hex").startsWith(shard)) out.push(Buffer.from(base))
  }
  return out
}

/** Runs the swapper over `pairs` for `seconds`; `done` completes with its exit when it ends. */
const startSwapper = (seconds: number, pairs: ReadonlyArray<readonly [string, string]>) =>
  Effect.gen(function*() {
    const ready = yield* Deferred.make<void>()
    const done = yield* Deferred.make<{ readonly code: number | null; readonly stdout: string; readonly stderr: string }>()
    yield* Effect.acquireRelease(
      Effect.sync(() => {
        const child = ChildProcess.spawn("python3", ["-c", swapper, String(seconds), ...pairs.flat()], {
          stdio: ["ignore", "pipe", "pipe"]
        })
        let stdout = ""
        let stderr = ""
        child.stdout.on("data", (d: Buffer) => {
          stdout += d.toString()
          if (stdout.startsWith("ready\n")) Deferred.unsafeDone(ready, Effect.void)
        })
        child.stderr.on("data", (d: Buffer) => stderr += d.toString())
        child.on("close", (code) => {
          Deferred.unsafeDone(ready, Effect.void)
          Deferred.unsafeDone(done, Effect.succeed({ code, stdout, stderr }))
        })
        return child
      }),
      (child) => Effect.zipRight(Effect.sync(() => child.kill("SIGKILL")), Deferred.await(done))
    )
    yield* Deferred.await(ready)
    return done
  })

describe("store directories swapped for symlinks during imports (item 9)", () => {
  it.scoped.skipIf(unavailable !== undefined)(
    "nothing is created, linked, renamed or removed outside the root; every import succeeds or fails typed, then imports cleanly",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const root = Path.join(dir, "store")
        const outside = Path.join(dir, "outside")
        Fs.mkdirSync(outside)
        const key = makeKey()
        const store = yield* makeStore(root, [key])
        const shard = "00"
        const items = contentsInShard(shard, 240).map((bytes, i) => {
          const digest = sha256(bytes)
          const source = Path.join(dir, `source-${i}`)
          Fs.writeFileSync(source, bytes)
          return { digest, source, size: bytes.length, signed: envelope(key, manifestOf(`m${i}`, 1, [{ digest, size: bytes.length }])) }
        })
        const importOne = (item: typeof items[number]) =>
          Effect.scoped(Effect.gen(function*() {
            yield* store.stageLeased(item.source, item.digest, item.size)
            return yield* store.activate(item.signed)
          }))

        // Decoys outside under the names the store would remove or rename through a swapped
        // directory (a kept copy, an empty lease directory): they must survive untouched.
        const owner = Owner.format(Owner.self())
        for (const item of items) {
          Fs.writeFileSync(Path.join(outside, `${owner}.${Digest.hex(item.digest)}.ready`), "decoy")
          Fs.mkdirSync(Path.join(outside, Digest.hex(item.digest)))
        }
        const decoys = treeOf(outside)

        // The first import makes every directory that is then swapped (none inside another).
        yield* importOne(items[0]!)
        const swapped = ["staging", "leases", `blobs/sha256/${shard}`, "manifests/sha256"]
        for (const d of swapped) Fs.symlinkSync(outside, Path.join(root, `${d}.swap`))
        const done = yield* startSwapper(3, swapped.map((d) => [Path.join(root, d), Path.join(root, `${d}.swap`)] as const))

        const outcomes: Array<string> = []
        let next = 1
        while (next < items.length && !(yield* Deferred.isDone(done))) {
          const result = yield* Effect.either(importOne(items[next++]!))
          outcomes.push(Either.isRight(result) ? "imported" : result.left._tag)
        }
        const swapperExit = yield* Deferred.await(done)
        assert.strictEqual(swapperExit.code, 0, swapperExit.stderr)
        const refused = outcomes.filter((o) => o !== "imported")
        console.info(
          `swap test: ${swapperExit.stdout.split("\n")[1]} rounds of ${swapped.length} swaps; ${outcomes.length} imports, ` +
            `${refused.length} refused (${[...new Set(refused)].join(", ")})`
        )

        assert.deepStrictEqual(treeOf(outside), decoys, "nothing outside the root is created, removed or renamed")
        assert.isAbove(refused.length, 0, "the swaps raced the imports")
        assert.deepStrictEqual([...new Set(refused)], ["UnsafePath"], "every refusal is a typed UnsafePath")

        // Once the swapping stops, every import succeeds (a copy refused at publish is reused) and
        // leaves nothing behind in staging.
        for (const item of items.slice(0, next)) yield* importOne(item)
        assert.deepStrictEqual(filesUnder(Path.join(root, "staging")), [])
        for (const [i, item] of items.slice(0, next).entries()) {
          const active = yield* store.active({ model: `m${i}` })
          assert.strictEqual(active.artifacts[0]!.path, Path.join(root, "blobs", "sha256", shard, Digest.hex(item.digest)))
          yield* store.verify(item.digest)
        }
        assert.deepStrictEqual(treeOf(outside), decoys)
      }),
    { timeout: 120_000 }
  )
})
