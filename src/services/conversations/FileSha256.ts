/**
 * sha256 of a file read through the platform FileSystem (model and state files are large): 4 MiB
 * reads into one buffer, interruptible between reads. Fails with the FileSystem's `PlatformError`.
 */
import type { PlatformError } from "@effect/platform/Error"
import * as FileSystem from "@effect/platform/FileSystem"
import * as Effect from "effect/Effect"
import * as Crypto from "node:crypto"

const CHUNK_BYTES = 4 * 1024 * 1024

export const sha256OfFile = (path: string): Effect.Effect<string, PlatformError, FileSystem.FileSystem> =>
  Effect.scoped(Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const file = yield* fs.open(path, { flag: "r" })
    const hash = Crypto.createHash("sha256")
    const buffer = Buffer.allocUnsafe(CHUNK_BYTES)
    while (true) {
      const n = Number(yield* file.read(buffer))
      if (n === 0) return hash.digest("hex")
      hash.update(buffer.subarray(0, n))
    }
  }))
