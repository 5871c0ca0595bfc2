/**
 * The entry's sink (ChunkChannel.layerSink): a push into a turn's inbox answers whether the turn
 * is still awaited. One that waits for room in a full inbox is let go, answered `false`, when the
 * entry stops reading (the inbox's scope closes): it does not wait for ever, holding its owner's
 * turn and conversation entity.
 */
import { RunnerAddress } from "@effect/cluster/RunnerAddress"
import { assert, describe, it } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { inboxCapacity, layerSink, TurnServer, TurnSink } from "../../src/cluster/ChunkChannel.js"
import { stamp } from "../../src/cluster/TurnChunk.js"
import { text } from "./chunks.js"

const unused = () => Effect.die("not used here")
const sink = Layer.unwrapScoped(Effect.gen(function*() {
  const dir = yield* Effect.acquireRelease(
    Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "ngsink-"))),
    (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
  )
  const at = RunnerAddress.make({ host: Path.join(dir, "runner.sock"), port: 0 })
  return layerSink(at, at).pipe(Layer.provide(Layer.succeed(TurnServer, TurnServer.of({ serve: unused, serveOneOff: unused, serveDecision: unused }))))
}))

describe("the entry's sink", () => {
  it.scoped("a push waiting on a full inbox is answered false once the entry stops reading; a push to a forgotten turn too", () =>
    Effect.gen(function*() {
      const turns = yield* TurnSink
      const chunks = Chunk.toArray(yield* Stream.runCollect(Stream.range(1, inboxCapacity + 1).pipe(Stream.map((t) => text([t])), stamp("t1"))))
      const reading = yield* Scope.make()
      const inbox = yield* Scope.extend(turns.open<never>("t1"), reading)
      assert.isTrue(yield* turns.deliver("t1", chunks.slice(0, inboxCapacity)), "room for a full inbox")
      // Nobody reads: the next push waits for room.
      const waiting = yield* Effect.fork(turns.deliver("t1", chunks.slice(inboxCapacity)))
      yield* Effect.yieldNow()
      assert.isTrue(Option.isNone(yield* Fiber.poll(waiting)), "the push waits")
      assert.strictEqual(inbox.received(), inboxCapacity + 1)
      yield* Scope.close(reading, Exit.void)
      assert.isFalse(yield* Fiber.join(waiting), "let go, not awaited")
      assert.isFalse(yield* turns.deliver("t1", chunks.slice(0, 1)), "a forgotten turn")
    }).pipe(Effect.provide(sink)))
})
