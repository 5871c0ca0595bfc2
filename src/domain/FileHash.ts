/**
 * sha256 of a file, streamed (model and state files are large) and interruptible: the read stops
 * when the fiber is interrupted. Fails with the operating system's error.
 */
import * as Effect from "effect/Effect"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs"

export const hashFile = (path: string): Effect.Effect<{ readonly hex: string; readonly size: number }, Error> =>
  Effect.async((resume) => {
    const hash = Crypto.createHash("sha256")
    let size = 0
    const stream = Fs.createReadStream(path, { highWaterMark: 4 * 1024 * 1024 })
    stream.on("data", (chunk) => {
      const bytes = typeof chunk === "string" ? Buffer.from(chunk) : chunk
      size += bytes.length
      hash.update(bytes)
    })
    stream.on("error", (cause) => resume(Effect.fail(cause)))
    stream.on("end", () => resume(Effect.succeed({ hex: hash.digest("hex"), size })))
    return Effect.sync(() => stream.destroy())
  })
