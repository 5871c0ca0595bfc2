/**
 * Cross-process reader leases on blobs: one file per lease under
 * `<root>/leases/<64 hex>/<owner>.<random>.lease`, where the owner token names the holding
 * process and its start time. A lease whose process is gone (or whose pid was recycled) is stale
 * and is removed by the next scan, so a dead holder never blocks reaping. Every function here
 * expects the caller to hold the store lock, and works relative to open, checked directories
 * (`Dir`).
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Crypto from "node:crypto"
import * as Path from "node:path"
import * as Digest from "../../domain/Digest.js"
import type { StoreIoError, UnsafePath } from "../StoreError.js"
import * as Dir from "./Dir.js"
import * as Fs from "./Fs.js"
import * as Owner from "./Owner.js"
import * as SafePath from "./SafePath.js"

export const leasesDir = "leases"

/** A lease file held by this process. */
export interface LeaseFile {
  readonly digest: Digest.Digest
  readonly path: string
}

/** What a scan found. */
export interface Scan {
  /** Hex digests with at least one live lease. */
  readonly held: ReadonlySet<string>
  /** Lease files of dead owners removed by this scan. */
  readonly staleRemoved: number
}

export const make = (root: string) => {
  const owner = Owner.format(Owner.self())

  /** Writes a lease file for `digest`. Call under the store lock. */
  const create = (digest: Digest.Digest): Effect.Effect<LeaseFile, UnsafePath | StoreIoError> =>
    Effect.scoped(Effect.gen(function*() {
      const at = new Date(yield* Clock.currentTimeMillis).toISOString()
      const name = `${owner}.${Crypto.randomBytes(6).toString("hex")}.lease`
      const file = yield* SafePath.createExclusive(root, [leasesDir, Digest.hex(digest)], name)
      yield* Fs.writeAll(file.fd, file.path, Buffer.from(`${JSON.stringify({ digest, pid: process.pid, at })}\n`))
      return { digest, path: file.path }
    })).pipe(Fs.orStoreError)

  /** Removes a lease file and, when it was the last, its directory. Call under the store lock. */
  const remove = (lease: LeaseFile): Effect.Effect<void, UnsafePath | StoreIoError> =>
    Effect.scoped(Effect.gen(function*() {
      const base = yield* Dir.openExisting(root, [leasesDir])
      if (Option.isNone(base)) return
      yield* Effect.scoped(Effect.gen(function*() {
        const dir = yield* Dir.child(base.value, Digest.hex(lease.digest), false)
        yield* Dir.unlink(dir, Path.basename(lease.path))
      })).pipe(Fs.catchCodes(["ENOENT"], () => Effect.void))
      yield* Dir.rmdir(base.value, Digest.hex(lease.digest)).pipe(Fs.catchCodes(["ENOTEMPTY", "EEXIST", "ENOENT"], () => Effect.void))
    })).pipe(Fs.orStoreError)

  /** Lists live leases, removing stale ones. Call under the store lock. */
  const scan: Effect.Effect<Scan, UnsafePath | StoreIoError> = Effect.scoped(Effect.gen(function*() {
    const base = yield* Dir.openExisting(root, [leasesDir])
    const held = new Set<string>()
    let staleRemoved = 0
    if (Option.isNone(base)) return { held, staleRemoved }
    for (const hex of yield* Dir.readdir(base.value)) {
      if (!Digest.isDigest(`sha256:${hex}`)) continue
      const live = yield* Effect.scoped(Effect.gen(function*() {
        const dir = yield* Dir.child(base.value, hex, false)
        let live = 0
        for (const name of yield* Dir.readdir(dir)) {
          const who = Owner.parse(name)
          if (who !== undefined && Owner.isAlive(who)) {
            live++
            continue
          }
          yield* Dir.unlink(dir, name).pipe(Fs.catchCodes(["ENOENT"], () => Effect.void))
          staleRemoved++
        }
        return live
      }))
      if (live > 0) held.add(hex)
      else yield* Dir.rmdir(base.value, hex).pipe(Fs.catchCodes(["ENOTEMPTY", "EEXIST", "ENOENT"], () => Effect.void))
    }
    return { held, staleRemoved }
  })).pipe(Fs.orStoreError)

  return { create, remove, scan }
}
