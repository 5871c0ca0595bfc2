/**
 * sha256 of a file read through the platform FileSystem, streamed in 4 MiB chunks (model and state
 * files are large); interruptible between chunks. Fails with the FileSystem's `PlatformError`.
 */
import type { PlatformError } from "@effect/platform/Error"
import * as FileSystem from "@effect/platform/FileSystem"
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import * as Crypto from "node:crypto"

export const sha256OfFile = (path: string): Effect.Effect<string, PlatformError, FileSystem.FileSystem> =>
  Effect.flatMap(FileSystem.FileSystem, (fs) =>
    Effect.suspend(() =>
      fs.stream(path, { chunkSize: FileSystem.MiB(4) }).pipe(
        Stream.runFold(Crypto.createHash("sha256"), (hash, chunk) => hash.update(chunk)),
        Effect.map((hash) => hash.digest("hex"))
      )
    ))
