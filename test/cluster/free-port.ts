/** A TCP port free on loopback when asked (for a runner's cluster or HTTP address in tests). */
import * as Effect from "effect/Effect"
import * as Net from "node:net"

export const freePort = Effect.async<number>((resume) => {
  const server = Net.createServer().listen(0, "127.0.0.1", () => {
    const address = server.address()
    server.close(() => resume(Effect.succeed(typeof address === "object" && address !== null ? address.port : 0)))
  })
})
