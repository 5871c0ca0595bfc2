/** The hash a checkpoint carries: sha256 over the token ids as little-endian u32, hex. */
import * as Crypto from "node:crypto"

export const hashTokens = (tokens: ArrayLike<number>): string => {
  const bytes = Buffer.alloc(tokens.length * 4)
  for (let i = 0; i < tokens.length; i++) bytes.writeUInt32LE(tokens[i]!, i * 4)
  return Crypto.createHash("sha256").update(bytes).digest("hex")
}
