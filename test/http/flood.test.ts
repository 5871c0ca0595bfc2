/**
 * A flood: 200 concurrent streaming chat requests on loopback. Each one either streams to its
 * end or is refused at once with 429 and Retry-After (the in-flight limit or the scheduler's
 * queue bound); none hangs (the whole flood is bounded in time), the scheduler and the server
 * return to idle, and the heap returns to its baseline.
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as TestServices from "effect/TestServices"
import * as V8 from "node:v8"
import * as Vm from "node:vm"
import { HttpTest } from "./support.js"

V8.setFlagsFromString("--expose-gc")
const collect = Vm.runInNewContext("gc") as () => void

/** Heap in use after a full collection. */
const settledHeap = () => {
  collect()
  collect()
  return process.memoryUsage().heapUsed
}

type Outcome =
  | { readonly kind: "streamed"; readonly events: number }
  | { readonly kind: "refused"; readonly retryAfter: string | null; readonly code: string }
  | { readonly kind: "other"; readonly status: number; readonly body: string }

const FLOOD = 200

const streamOnce = async (baseUrl: string, i: number): Promise<Outcome> => {
  const response = await fetch(`${baseUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      model: "qwen-chat",
      messages: [{ role: "user", content: `flood ${i}` }],
      max_tokens: 2,
      stream: true
    })
  })
  if (response.status === 429) {
    const body = (await response.json()) as { error: { code: string } }
    return { kind: "refused", retryAfter: response.headers.get("retry-after"), code: body.error.code }
  }
  const text = await response.text()
  if (response.status !== 200) return { kind: "other", status: response.status, body: text }
  const events = text.split("\n\n").filter((e) => e.startsWith("data: "))
  return events.at(-1) === "data: [DONE]" ? { kind: "streamed", events: events.length } : { kind: "other", status: 200, body: text }
}

describe("HTTP flood", () => {
  layer(
    HttpTest.layer({
      // Limits well below the flood, so that both outcomes occur however the requests spread in
      // time (with 128 in flight and 32 queued, a run on a loaded machine had no 429 at all).
      http: { maxInFlight: 32 },
      runtime: { scheduler: { maxQueued: 8 } }
    }),
    { timeout: 120_000 }
  )((it) => {
    it.effect("200 concurrent streams each stream to the end or get 429; nothing hangs; the heap returns to its baseline", () =>
      Effect.gen(function*() {
        const { baseUrl, inFlight, provider } = yield* HttpTest
        // Warm: one request first, so the baseline includes what the first request allocates once.
        assert.strictEqual((yield* Effect.promise(() => streamOnce(baseUrl, -1))).kind, "streamed")
        const baseline = settledHeap()
        const started = Date.now()
        const outcomes = yield* Effect.promise(() =>
          Promise.all(Array.from({ length: FLOOD }, (_, i) => streamOnce(baseUrl, i)))
        ).pipe(
          Effect.timeoutFail({ duration: "240 seconds", onTimeout: () => new Error("the flood did not end in 240 s") }),
          TestServices.provideLive
        )
        const seconds = (Date.now() - started) / 1000
        const streamed = outcomes.filter((o) => o.kind === "streamed").length
        const refused = outcomes.filter((o) => o.kind === "refused")
        const other = outcomes.filter((o) => o.kind === "other")
        console.log(`flood: ${streamed} streamed, ${refused.length} refused with 429, in ${seconds.toFixed(1)} s`)
        assert.deepStrictEqual(other, [])
        assert.strictEqual(streamed + refused.length, FLOOD)
        assert.isAbove(streamed, 0)
        assert.isAbove(refused.length, 0)
        for (const r of refused) assert.isNotNull(r.retryAfter)
        const { scheduler } = yield* provider.readiness
        assert.deepStrictEqual([scheduler.running, scheduler.queued, yield* inFlight.current], [0, 0, 0])
        const after = settledHeap()
        console.log(`heap: ${(baseline / 2 ** 20).toFixed(1)} MiB before, ${(after / 2 ** 20).toFixed(1)} MiB after`)
        assert.isBelow(after - baseline, 16 * 2 ** 20)
      }), 300_000)
  })
})
