/**
 * The Jepsen-style tally: three real runners (Unix sockets, one SQLite storage, qwen-chat with one
 * thread), clients sending turns of their conversations through r1 without pause, and r2 and r3
 * SIGKILLed in turn while a turn streams from them (each started again in the background for its
 * next kill). Every request is recorded with how it ended: served whole, or a typed failure; a
 * request that never ends, or ends with a defect, fails the test. qwen-chat is scripted: greedy
 * decoding answers every chat with the same reply, so every delivered stream is checked token by
 * token against it (a served stream is the reply's first `generatedTokens` tokens, no more, no
 * fewer; a failed one delivered a prefix of it, as many tokens as its `GenerationFailed` says).
 * Greedy turns are resumable: one whose runner dies after delivering tokens is resumed on the
 * shard's next owner (RoutedTurn.routedTurn), so it ends served, and its whole stream is checked.
 * After each kill, a turn of a conversation the dead runner held is sent at once: the time to its
 * first chunk is the cluster's time to serve again; the time until another runner locks its shard
 * (read from the storage) is the detection, bounded by twice the detection time.
 *
 * Kills: `NATIVEGEN_KILL_TALLY_KILLS` (3 by default, in the suite; `npm run bench cluster-kill` runs 20).
 * Storage: `NATIVEGEN_KILL_TALLY_STORAGE` = `sqlite` (the default) or `postgres` (a database of its own on
 * NATIVEGEN_TEST_POSTGRES's server; `BENCH_CLUSTER_POSTGRES=URL npm run bench cluster-kill` sets both).
 */
import { assert, describe, layer } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Chunk from "effect/Chunk"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Random from "effect/Random"
import * as Schedule from "effect/Schedule"
import * as Stream from "effect/Stream"
import * as Status from "../../src/cluster/Status.js"
import type { ChatMessage, Checkpoint, GenerateChunk, GenerateRequest } from "../../src/domain/Inference.js"
import { unavailable } from "./postgres.js"
import { idsOwnedBy, KillCluster, layer as clusterLayer, type Member, settled, viewLayer } from "./kill-support.js"

const KILLS = Number(process.env.NATIVEGEN_KILL_TALLY_KILLS ?? 3)
const STORAGE = process.env.NATIVEGEN_KILL_TALLY_STORAGE === "postgres" ? "postgres" : "sqlite"
/** The test's bound: the runners' start, then each kill (a restart takes about 20 s here under load), generously. */
const TEST_LIMIT = 240_000 + KILLS * 90_000
const DETECTION = 3
const CLIENTS = 3
const CONVERSATIONS_PER_CLIENT = 4
const MAX_TOKENS = 32
/** Turns after which a client starts its conversation again under a new id (the history must fit the 1,024-token context). */
const TURNS_PER_CONVERSATION = 8
/**
 * The first chunk after a kill also waits for a CPU: the new owner prefills the probe (and its
 * queue) on two cores shared with the other runners, the clients and other agents (load 10-17).
 * Detection itself (the dead runner's shard locked by another runner) is held to 2 x detection.
 */
const SERVE_ALLOWANCE_MILLIS = 4_000
/** A request that has not ended after this never will: it counts as unfinished. */
const REQUEST_LIMIT = Duration.seconds(60)

const settings = { maxTokens: MAX_TOKENS, sampling: { temperature: 0 }, thinking: false } as const

interface Outcome {
  readonly request: number
  readonly conversation: string
  /** `served`, a typed failure's tag, `defect` or `unfinished`. */
  readonly ended: string
  readonly followUp: boolean
  /** Tokens delivered to the client, in order. */
  readonly tokens: ReadonlyArray<number>
  readonly done?: Extract<GenerateChunk, { _tag: "Done" }>
  readonly deliveredTokens?: number
  readonly detail?: string
}

interface InFlight {
  readonly conversation: string
  chunks: number
}

const cluster = Layer.provideMerge(viewLayer, clusterLayer({ names: ["r1", "r2", "r3"], shards: 12, detection: DETECTION, storage: STORAGE }))

const median = (xs: ReadonlyArray<number>) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN

const skipped = STORAGE === "postgres" ? unavailable : undefined

describe.skipIf(skipped !== undefined)(`runners SIGKILLed mid-stream (${STORAGE} storage)${skipped === undefined ? "" : ` [skipped: ${skipped}]`}`, () => {
  layer(cluster, { timeout: TEST_LIMIT + 300_000, excludeTestServices: true })("three runners, clients through r1", (it) => {
    it.effect(`${KILLS} kills: every request ends exactly once, served whole or with a typed failure; no token twice or lost; served again within twice the detection time`, () =>
      Effect.gen(function*() {
        const { members } = yield* KillCluster
        const [r1, r2, r3] = members as [Member, Member, Member]
        const entry = r1.provider()
        const initial = yield* settled(members)

        // The scripted reply, from one turn before anything is killed.
        const [referenceId] = yield* idsOwnedBy(initial, r1, 1, "reference")
        const reference = Chunk.toArray(yield* Stream.runCollect(
          entry.generate({ messages: [{ role: "user", content: "hello" }], conversation: referenceId!, ...settings })
        )).flatMap((c) => (c._tag === "Done" ? [] : c.tokens))
        assert.isAbove(reference.length, 8)

        const outcomes: Array<Outcome> = []
        const inFlight = new Map<number, InFlight>()
        let requests = 0
        let stopping = false

        /** One request through r1, recorded once with how it ended. */
        const send = (request: GenerateRequest, followUp: boolean) =>
          Effect.gen(function*() {
            const id = requests++
            const conversation = request.conversation!
            const tokens: Array<number> = []
            let answer = ""
            let done: Outcome["done"]
            let afterDone = 0
            const flight: InFlight = { conversation, chunks: 0 }
            inFlight.set(id, flight)
            const exit = yield* entry.generate(request).pipe(
              Stream.runForEach((chunk) =>
                Effect.sync(() => {
                  flight.chunks++
                  if (done !== undefined) afterDone++
                  else if (chunk._tag === "Done") done = chunk
                  else {
                    tokens.push(...chunk.tokens)
                    if (chunk._tag === "Text" && chunk.channel === "answer") answer += chunk.text
                  }
                })
              ),
              Effect.timeoutFail({ duration: REQUEST_LIMIT, onTimeout: () => "unfinished" as const }),
              Effect.exit
            )
            inFlight.delete(id)
            const base = { request: id, conversation, followUp, tokens }
            const outcome: Outcome = Exit.isSuccess(exit)
              ? afterDone > 0
                ? { ...base, ended: "defect", detail: `${afterDone} chunks after Done` }
                : done === undefined
                ? { ...base, ended: "defect", detail: "no Done chunk" }
                : { ...base, ended: "served", done }
              : Option.match(Cause.failureOption(exit.cause), {
                onNone: (): Outcome => ({ ...base, ended: "defect", detail: Cause.pretty(exit.cause) }),
                onSome: (e): Outcome =>
                  e === "unfinished"
                    ? { ...base, ended: "unfinished" }
                    : { ...base, ended: e._tag, detail: e.message, ...(e._tag === "GenerationFailed" ? { deliveredTokens: e.deliveredTokens } : {}) }
              })
            outcomes.push(outcome)
            return { outcome, answer }
          })

        /** A client: turns of its own conversations (first turns, and follow-ups with the last checkpoint), until stopped. */
        const client = (n: number) =>
          Effect.gen(function*() {
            const held = new Map<string, { messages: ReadonlyArray<ChatMessage>; checkpoint: Checkpoint }>()
            const turns = new Map<number, number>()
            for (let turn = 0; !stopping; turn++) {
              const k = yield* Random.nextIntBetween(0, CONVERSATIONS_PER_CLIENT)
              const count = turns.get(k) ?? 0
              turns.set(k, count + 1)
              const conversation = `client${n}-${k}.${Math.floor(count / TURNS_PER_CONVERSATION)}`
              const last = held.get(conversation)
              const user: ChatMessage = { role: "user", content: `turn ${turn} of client ${n}` }
              const { answer, outcome } = yield* send(
                last === undefined
                  ? { messages: [user], conversation, ...settings }
                  : { messages: [...last.messages, user], conversation, checkpoint: last.checkpoint, ...settings },
                last !== undefined
              )
              // A served turn moves the conversation on; after a failure the next turn continues from the last checkpoint.
              if (outcome.done?.checkpoint !== undefined) {
                held.set(conversation, {
                  messages: [...(last?.messages ?? []), user, { role: "assistant", content: answer }],
                  checkpoint: outcome.done.checkpoint
                })
              }
            }
          })
        const clients = yield* Effect.forkAll(Array.from({ length: CLIENTS }, (_, n) => client(n)))

        /** The shards a runner holds now. */
        const shardsOf = (member: Member) =>
          Effect.map(Effect.orDie(Status.snapshot), (s) => ({ snapshot: s, shards: [...(s.shards ?? [])].filter(([, a]) => a === member.stored).map(([shard]) => shard) }))
        const restarts = new Map<Member, Fiber.RuntimeFiber<void>>()
        const probes: Array<string> = []
        const kills: Array<{ victim: string; midStream: boolean; movedMillis: number; servedAgainMillis: number; restartWaitMillis: number; killReturnedMillis: number }> = []

        for (let k = 0; k < KILLS; k++) {
          const victim = k % 2 === 0 ? r2 : r3
          // Started again after its last kill: wait for it, and for it to hold shards again.
          const waitStarted = performance.now()
          const restart = restarts.get(victim)
          if (restart !== undefined) yield* Fiber.join(restart)
          const { snapshot } = yield* shardsOf(victim).pipe(
            Effect.filterOrFail((held) => held.shards.length > 0),
            Effect.retry(Schedule.spaced("200 millis").pipe(Schedule.upTo("90 seconds"))),
            Effect.orDie
          )
          const restartWaitMillis = performance.now() - waitStarted
          // A turn streaming from it (at least one chunk delivered), then a random moment.
          const owners = new Map<string, string | undefined>()
          const ownerOf = (conversation: string) =>
            owners.has(conversation) ? Effect.succeed(owners.get(conversation)) : Effect.tap(Status.ownerOf(snapshot, conversation), (o) => Effect.sync(() => owners.set(conversation, o)))
          const streaming = yield* Effect.gen(function*() {
            for (const flight of inFlight.values()) {
              if (flight.chunks > 0 && (yield* ownerOf(flight.conversation)) === victim.stored) return true
            }
            return yield* Effect.fail("none yet")
          }).pipe(Effect.retry(Schedule.spaced("5 millis").pipe(Schedule.upTo("20 seconds"))), Effect.orElseSucceed(() => false))
          yield* Effect.sleep(Duration.millis(yield* Random.nextIntBetween(0, 40)))
          const [probe] = yield* idsOwnedBy(snapshot, victim, 1, `probe${k}`)
          const probeShard = yield* Status.shardOf(probe!)
          // Times are taken from the SIGKILL; the kill returns once the process is reaped and its client closed.
          const killedAt = performance.now()
          yield* victim.kill
          const killReturnedMillis = performance.now() - killedAt
          // When the probe's shard is locked by another runner, or by the victim started again
          // (same address: a restart that comes back within the detection time takes its shards
          // back before another runner does), read from the storage every 100 ms.
          let restarted = false
          const moved = yield* Effect.orDie(Status.snapshot).pipe(
            Effect.flatMap((s) => {
              const holder = s.shards?.get(probeShard)
              return holder !== undefined && (holder !== victim.stored || restarted)
                ? Effect.succeed(performance.now() - killedAt)
                : Effect.fail("not yet")
            }),
            Effect.retry(Schedule.spaced("100 millis").pipe(Schedule.upTo(REQUEST_LIMIT))),
            Effect.option,
            Effect.fork
          )
          if (k + 2 < KILLS) restarts.set(victim, yield* Effect.forkDaemon(Effect.tap(victim.start, () => Effect.sync(() => (restarted = true)))))
          // At once, a turn of a conversation the dead runner held: served again when its shard has moved.
          let first: number | undefined
          const served = yield* entry.generate({ messages: [{ role: "user", content: "again" }], conversation: probe!, ...settings }).pipe(
            Stream.tap(() => Effect.sync(() => (first ??= performance.now()))),
            Stream.runCollect,
            Effect.timeout(REQUEST_LIMIT),
            Effect.exit
          )
          // Served again: its first chunk came. Its end is tallied like any request's (a rebalance may cut it: a typed failure).
          const probeEnd = Exit.isSuccess(served)
            ? "served"
            : Option.match(Cause.failureOption(served.cause), { onNone: () => "defect", onSome: (e) => e._tag })
          probes.push(probeEnd)
          const movedMillis = Option.getOrElse(yield* Fiber.join(moved), () => Infinity)
          // Logged from one detection time on (within the bound too): the stalls to explain (docs/cluster.md, Open problems).
          if (first === undefined || first - killedAt > DETECTION * 1000 || probeEnd === "defect" || probeEnd === "TimeoutException") {
            const now = yield* Effect.orDie(Status.snapshot)
            yield* Effect.logInfo(
              `kill ${k}: probe ${probe} (shard ${yield* Status.shardOf(probe!)}) ${first === undefined ? "not served" : `served late (${(first - killedAt).toFixed(0)} ms)`}; storage now: ${JSON.stringify(now.runners)} ` +
                `${JSON.stringify([...(now.shards ?? [])])}\nin flight: ${JSON.stringify([...inFlight.values()])}\n--- r1:\n${r1.server()?.log().slice(-5000)}`
            )
          }
          assert.isDefined(first, `kill ${k}: the probe turn was not served: ${Exit.isFailure(served) ? Cause.pretty(served.cause) : ""}`)
          assert.notInclude(["defect", "TimeoutException"], probeEnd, `kill ${k}: the probe turn`)
          kills.push({ victim: victim.name, midStream: streaming, movedMillis, servedAgainMillis: (first ?? performance.now()) - killedAt, restartWaitMillis, killReturnedMillis })
        }

        stopping = true
        yield* Fiber.join(clients)
        yield* Effect.forEach(restarts.values(), Fiber.interrupt, { discard: true })

        // The tally.
        const byEnd = new Map<string, number>()
        for (const o of outcomes) byEnd.set(o.ended, (byEnd.get(o.ended) ?? 0) + 1)
        const served = kills.map((k) => k.servedAgainMillis)
        const moves = kills.map((k) => k.movedMillis)
        yield* Effect.logInfo([
          `tally: ${kills.length} kills (${kills.filter((k) => k.midStream).length} with a turn streaming from the victim), ` +
          `${outcomes.length} requests (${outcomes.filter((o) => o.followUp).length} follow-ups): ` +
          [...byEnd].map(([end, n]) => `${end} ${n}`).join(", "),
          `probe turns (one after each kill): ${probes.map((p) => p).join(", ")}`,
          `turns resumed after their runner was lost (r1's log): ${(r1.server()?.log().split("); resumed").length ?? 1) - 1}`,
          `recomputed or restored follow-ups served: ${outcomes.filter((o) => o.followUp && o.done !== undefined && o.done.usage.reuse !== "continuation").length}`,
          `served again after a kill (first chunk of a turn of the dead runner's shard): min ${Math.min(...served).toFixed(0)} ms, ` +
          `median ${median(served).toFixed(0)} ms, max ${Math.max(...served).toFixed(0)} ms (bound ${2 * DETECTION} s + ${SERVE_ALLOWANCE_MILLIS} ms for a CPU)`,
          `its shard locked by another runner: min ${Math.min(...moves).toFixed(0)} ms, median ${median(moves).toFixed(0)} ms, ` +
          `max ${Math.max(...moves).toFixed(0)} ms (detection ${DETECTION} s, bound ${2 * DETECTION} s)`,
          ...kills.map((k, i) =>
            `kill ${i} ${k.victim}: ${k.midStream ? "mid-stream" : "no stream seen"}, shard moved ${k.movedMillis.toFixed(0)} ms, ` +
            `served again ${k.servedAgainMillis.toFixed(0)} ms, waited ${k.restartWaitMillis.toFixed(0)} ms for it to be back, ` +
            `the kill returned after ${k.killReturnedMillis.toFixed(0)} ms`
          ),
          ...outcomes.filter((o) => o.ended !== "served").map((o) => `request ${o.request} (${o.conversation}${o.followUp ? ", follow-up" : ""}): ${o.ended} after ${o.tokens.length} tokens: ${o.detail ?? ""}`)
        ].join("\n"))

        // Every request ended exactly once, served or with a typed failure.
        assert.strictEqual(outcomes.length, requests)
        assert.strictEqual(new Set(outcomes.map((o) => o.request)).size, requests)
        for (const o of outcomes) {
          assert.notInclude(["defect", "unfinished"], o.ended, `request ${o.request}: ${o.detail ?? ""}`)
          if (o.ended === "served") {
            // Whole: the reply's first tokens, exactly as many as the turn generated.
            assert.strictEqual(o.tokens.length, o.done!.usage.generatedTokens, `request ${o.request}`)
            assert.deepStrictEqual(o.tokens, reference.slice(0, o.tokens.length), `request ${o.request}`)
            assert.strictEqual(o.tokens.length, Math.min(MAX_TOKENS, reference.length), `request ${o.request}`)
          } else {
            // A failure after some tokens: those are the reply's first ones, none twice, and the count is the one stated.
            assert.deepStrictEqual(o.tokens, reference.slice(0, o.tokens.length), `request ${o.request}`)
            if (o.deliveredTokens !== undefined) assert.strictEqual(o.deliveredTokens, o.tokens.length, `request ${o.request}`)
          }
        }
        for (const [i, k] of kills.entries()) {
          assert.isBelow(k.movedMillis, 2 * DETECTION * 1000, `kill ${i}: the shard of ${k.victim} moved`)
          assert.isBelow(k.servedAgainMillis, 2 * DETECTION * 1000 + SERVE_ALLOWANCE_MILLIS, `kill ${i}: served again after killing ${k.victim}`)
        }
        assert.isAbove(outcomes.filter((o) => o.ended === "served").length, 0)
      }), TEST_LIMIT)
  })
})
