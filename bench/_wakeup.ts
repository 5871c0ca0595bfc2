/**
 * A development tool (not a figure): what waking another process costs on this machine, apart
 * from any runtime. Two plain Node processes ping-pong one byte over a Unix socket: back to back
 * (both stay on CPU: the socket's own cost), and with a pause before each ping (the other side has
 * gone idle and its core may have slept: what a message between two idle runners pays). Medians
 * of the round trip, µs. `node bench/_wakeup.ts [pings] [pauseMs]`.
 */
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Net from "node:net"
import * as Os from "node:os"
import * as Path from "node:path"

const [role, arg] = process.argv.slice(2)
if (role === "echo") {
  Net.createServer((s) => s.on("data", (d) => s.write(d))).listen(arg!, () => process.send?.("up"))
} else {
  const pings = Number(role ?? 300)
  const pause = Number(arg ?? 10)
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "ngw-"))
  const path = Path.join(dir, "echo.sock")
  const child = ChildProcess.fork(import.meta.filename, ["echo", path], { stdio: "inherit" })
  child.once("message", async () => {
    const socket = Net.connect(path)
    await new Promise((ok) => socket.once("connect", ok))
    socket.setNoDelay?.(true)
    const ping = () => new Promise<number>((ok) => {
      const t = process.hrtime.bigint()
      socket.once("data", () => ok(Number(process.hrtime.bigint() - t) / 1000))
      socket.write("x")
    })
    const median = (xs: Array<number>) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
    for (let round = 0; round < 3; round++) {
      const hot: Array<number> = [], idle: Array<number> = []
      for (let i = 0; i < pings; i++) hot.push(await ping())
      for (let i = 0; i < pings / 10; i++) {
        await new Promise((ok) => setTimeout(ok, pause))
        idle.push(await ping())
      }
      console.log(`round ${round}: round trip back to back ${median(hot).toFixed(0)} µs; after ${pause} ms idle ${median(idle).toFixed(0)} µs (p90 ${idle[Math.floor(idle.length * 0.9)]!.toFixed(0)})`)
    }
    socket.destroy()
    child.kill()
    Fs.rmSync(dir, { recursive: true, force: true })
  })
}
