import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as ChildProcess from "node:child_process"
import * as Path from "node:path"
import { awaitGone, isAlive } from "./support/processes.js"

const hostScript = Path.join(import.meta.dirname, "support", "host-script.ts")

describe("engine child lifetime", () => {
  it.live("the child exits when its host is SIGKILLed (no orphans)", () =>
    Effect.gen(function*() {
      const host = ChildProcess.spawn(process.execPath, ["--import", "tsx", hostScript], {
        stdio: ["ignore", "pipe", "inherit"]
      })
      const childPid = yield* Effect.async<number, Error>((resume) => {
        let out = ""
        host.stdout!.on("data", (d: Buffer) => {
          out += d.toString()
          const line = out.split("\n")[0]
          if (out.includes("\n")) resume(Effect.succeed(Number(line)))
        })
        host.once("exit", (code) => resume(Effect.fail(new Error(`host exited early with ${code}`))))
      })
      assert.isTrue(isAlive(childPid))
      host.kill("SIGKILL")
      yield* awaitGone(childPid)
    }), { timeout: 60_000 })
})
