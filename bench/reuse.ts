/**
 * Time to first token of a follow-up turn that reuses ~95% of a ~4,000-token prompt, per reuse
 * kind, against a cold prefill of a prompt of the same shape (issue 7's report figures), on the
 * `bench` model at 1 thread, in one run with the kinds' order rotated every round so that machine
 * load falls on every kind alike. Each kind builds its own conversation from its own words, so
 * nothing is reused across kinds or rounds except what the kind drives:
 *
 * - cold: a fresh conversation takes a slot that holds only a tiny filler conversation (two
 *   fillers run first, so the slot it takes over is cheap to save): only BOS/template tokens match.
 * - continuation: turn 1 is the ~3,800-token chat; turn 2 adds the reply and a ~200-token user
 *   message, with turn 1's checkpoint.
 * - prefix: turn 1 is the whole ~4,000-token chat; turn 2 changes only the last user message and
 *   has no checkpoint.
 * - restored: turn 1 as for continuation, then two filler conversations evict it to its state
 *   file; turn 2 with the checkpoint restores it from disk (the slot it takes over holds a filler).
 * - prepared: `Provider.prepare` with the ~3,800-token chat (awaited), then the turn without a
 *   checkpoint.
 *
 * Measured per turn: the Done chunk's `timings.firstTokenMillis` (submit to first token, in the
 * Provider) and the wall clock here from running the stream to its first Text chunk. Besides, in
 * the restored kind, the parts of a save and a restore are timed directly on the engine (saveState
 * of the slot, sha256 of the file as Conversations hashes it, restoreState into the anonymous
 * sequence), and the turn that evicts the conversation (its save inside) is timed.
 *
 * Set BENCH_REUSE_ROUNDS to change the number of rounds (default 5: each kind once in each position).
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { ensureModel } from "../fixtures/models.js"
import { benchBackend, benchModel } from "./_target.js"
import type { ChatMessage, GenerateRequest, ReuseKind } from "../src/domain/Inference.js"
import * as Runtime from "../src/layers/Runtime.js"
import * as Conversations from "../src/services/Conversations.js"
import { NativeWorker } from "../src/services/NativeWorker.js"
import { Provider } from "../src/services/Provider.js"
import { Scheduler } from "../src/services/Scheduler.js"
import { type Done, type Turn, turn } from "./_generation.js"
import { wordsOf } from "./peer/Prompts.js"

const ROUNDS = Number(process.env.BENCH_REUSE_ROUNDS ?? 5)
/** Tokens of the chat that turn 1 (or preparation) leaves in the slot. */
const HISTORY_TOKENS = 3800
/** Tokens the follow-up adds (assistant reply or fixed reply, and the new user message). */
const NEW_TOKENS = 200
const MAX_TOKENS = 4
const SLOTS = 2
const MiB = 1024 * 1024
const KINDS = ["cold", "continuation", "prefix", "restored", "prepared"] as const
type Kind = typeof KINDS[number]

// Words of the fixture vocabulary: each is one token after a space.
interface Sizes {
  readonly system: number
  readonly user1: number
  readonly assistant1: number
  readonly user2: number
  readonly user3: number
}
/** The ~3,800-token chat of a seed: system, user, assistant, user. */
const historyOf = (seed: string, s: Sizes): ReadonlyArray<ChatMessage> => [
  { role: "system", content: wordsOf(`${seed}/system`, s.system) },
  { role: "user", content: wordsOf(`${seed}/user1`, s.user1) },
  { role: "assistant", content: wordsOf(`${seed}/assistant1`, s.assistant1) },
  { role: "user", content: wordsOf(`${seed}/user2`, s.user2) }
]
const replyOf = (seed: string): ChatMessage => ({ role: "assistant", content: wordsOf(`${seed}/reply`, MAX_TOKENS) })
const userOf = (seed: string, s: Sizes): ChatMessage => ({ role: "user", content: wordsOf(`${seed}/user3`, s.user3) })

const loadavg = () => Fs.readFileSync("/proc/loadavg", "utf8").trim()
const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  const m = s.length >> 1
  return s.length === 0 ? NaN : s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2
}
const min = (xs: ReadonlyArray<number>) => Math.min(...xs)
const timed = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const t = performance.now()
    const value = yield* effect
    return { value, ms: performance.now() - t }
  })

/** A tiny conversation that takes over the least recently used slot. */
const filler = (id: string) =>
  turn({ messages: [{ role: "user", content: wordsOf(id, 4) }], conversation: id, maxTokens: 1, sampling: { temperature: 0 } })

interface Measured {
  readonly kind: Kind
  readonly round: number
  readonly position: number
  readonly turn: Turn
  readonly expected: string
  readonly ok: boolean
  readonly request: string
}

interface RestoreParts {
  readonly fileBytes: number
  readonly stateTokens: number
  readonly saveState: number
  readonly sha256: number
  readonly restoreState: number
  /** The turn that evicted the conversation (its save to disk inside): firstTokenMillis. */
  readonly evictingTurn: number
  /** Conversations' own state file of the conversation, and its sidecar. */
  readonly conversationFile: number
  readonly sidecarBytes: number
}

const describeRequest = (r: GenerateRequest) =>
  JSON.stringify({
    conversation: r.conversation,
    checkpoint: r.checkpoint === undefined ? undefined : { tokens: r.checkpoint.tokens },
    messages: r.messages.map((m) => `${m.role}:${m.content.split(" ").length}w`),
    maxTokens: r.maxTokens
  })

const program = (directory: string) =>
  Effect.gen(function*() {
    const provider = yield* Provider
    const worker = yield* NativeWorker
    const scheduler = yield* Scheduler
    console.log(`load average at start: ${loadavg()}`)

    // Sizes: one token per word after the first of each message; fit the chat to HISTORY_TOKENS.
    const probe: Sizes = { system: 300, user1: 1150, assistant1: 1150, user2: 1150, user3: 180 }
    const probeTokens = (yield* provider.count({ messages: historyOf("probe", probe) })).tokens
    const sizes: Sizes = { ...probe, user2: probe.user2 + HISTORY_TOKENS - probeTokens }
    const chatTokens = (yield* provider.count({ messages: historyOf("probe", sizes) })).tokens
    const withNew = (yield* provider.count({ messages: [...historyOf("probe", sizes), replyOf("probe"), userOf("probe", probe)] })).tokens
    const s: Sizes = { ...sizes, user3: probe.user3 + NEW_TOKENS - (withNew - chatTokens) }
    const followTokens = (yield* provider.count({ messages: [...historyOf("probe", s), replyOf("probe"), userOf("probe", s)] })).tokens
    console.log(`chat ${chatTokens} tokens (with the assistant prompt), follow-up ${followTokens} tokens; ${ROUNDS} rounds; follow-up maxTokens ${MAX_TOKENS}, greedy`)

    // Warm-up, discarded: one full-size prefill on the anonymous sequence.
    const warm = yield* turn({ messages: [...historyOf("warm", s), replyOf("warm"), userOf("warm", s)], maxTokens: MAX_TOKENS })
    console.log(`warm-up (anonymous, cold): firstTokenMillis ${warm.done.timings.firstTokenMillis} ms, ${warm.done.usage.promptTokens} tokens`)

    const measured: Array<Measured> = []
    const restoreParts: Array<RestoreParts> = []
    const prepares: Array<{ ms: number; prepared: number; total: number; complete: boolean }> = []
    const stateFile = (conversation: string) => {
      const modelDir = Fs.readdirSync(directory).map((d) => Path.join(directory, d)).find((d) => Fs.statSync(d).isDirectory())!
      const name = Crypto.createHash("sha256").update(conversation).digest("hex")
      return { state: Path.join(modelDir, `${name}.state`), sidecar: Path.join(modelDir, `${name}.json`) }
    }

    const runKind = (kind: Kind, round: number, position: number) =>
      Effect.gen(function*() {
        const id = `${kind}-${round}`
        const history = historyOf(id, s)
        const reply = replyOf(id)
        const user = userOf(id, s)
        const greedy = { temperature: 0 } as const
        let request: GenerateRequest
        let check: (d: Done) => { ok: boolean; expected: string }
        switch (kind) {
          case "cold": {
            yield* filler(`${id}-filler-a`)
            yield* filler(`${id}-filler-b`)
            request = { messages: [...history, reply, user], conversation: id, maxTokens: MAX_TOKENS, sampling: greedy }
            check = (d) => ({ ok: d.usage.reusedTokens <= 8, expected: "cold, or prefix with only BOS/template tokens (<= 8)" })
            break
          }
          case "continuation":
          case "restored": {
            const one = yield* turn({ messages: history, conversation: id, maxTokens: MAX_TOKENS, sampling: greedy })
            const checkpoint = one.done.checkpoint!
            if (kind === "restored") {
              const slot = scheduler.slotOf(id)!
              const scratch = Path.join(directory, `scratch-${round}.state`)
              const saved = yield* timed(worker.saveState(slot, scratch))
              const hashed = yield* timed(Conversations.digestOfFile(scratch))
              const restored = yield* timed(worker.restoreState(SLOTS, scratch))
              Fs.rmSync(scratch)
              yield* filler(`${id}-filler-a`)
              const evicting = yield* filler(`${id}-filler-b`)
              const files = stateFile(id)
              restoreParts.push({
                fileBytes: saved.value.fileBytes,
                stateTokens: saved.value.tokens,
                saveState: saved.ms,
                sha256: hashed.ms,
                restoreState: restored.ms,
                evictingTurn: evicting.done.timings.firstTokenMillis,
                conversationFile: Fs.existsSync(files.state) ? Fs.statSync(files.state).size : -1,
                sidecarBytes: Fs.existsSync(files.sidecar) ? Fs.statSync(files.sidecar).size : -1
              })
              if (scheduler.slotOf(id) !== undefined) console.log(`  note: ${id} still owns slot ${scheduler.slotOf(id)} after two fillers`)
            }
            request = {
              messages: [...history, { role: "assistant", content: one.answer }, user],
              conversation: id,
              checkpoint,
              maxTokens: MAX_TOKENS,
              sampling: greedy
            }
            const reuse: ReuseKind = kind
            check = (d) => ({
              ok: d.usage.reuse === reuse && d.usage.reusedTokens === checkpoint.tokens - 1,
              expected: `${reuse}, reusedTokens ${checkpoint.tokens - 1} (checkpoint ${checkpoint.tokens} - 1)`
            })
            break
          }
          case "prefix": {
            const first = userOf(`${id}/first`, s)
            const one = yield* turn({ messages: [...history, reply, first], conversation: id, maxTokens: MAX_TOKENS, sampling: greedy })
            const held = one.done.usage.promptTokens
            request = { messages: [...history, reply, user], conversation: id, maxTokens: MAX_TOKENS, sampling: greedy }
            // Prefix reuse keeps whole prefill chunks only (exact parity with a cold run).
            const floor = Math.floor((chatTokens - 8) / 128) * 128
            check = (d) => ({
              ok: d.usage.reuse === "prefix" && d.usage.reusedTokens >= floor && d.usage.reusedTokens % 128 === 0 &&
                d.usage.reusedTokens < held,
              expected: `prefix, reusedTokens a multiple of 128 in [${floor}, ${held})`
            })
            break
          }
          case "prepared": {
            const prepared = yield* timed(provider.prepare({ conversation: id, prefix: history.slice(0, 1), history: [...history.slice(1), reply] }))
            prepares.push({ ms: prepared.ms, prepared: prepared.value.preparedTokens, total: prepared.value.totalTokens, complete: prepared.value.complete })
            request = { messages: [...history, reply, user], conversation: id, maxTokens: MAX_TOKENS, sampling: greedy }
            check = (d) => ({
              ok: d.usage.reuse === "prepared" && d.usage.reusedTokens >= prepared.value.preparedTokens,
              expected: `prepared, reusedTokens >= ${prepared.value.preparedTokens} (preparedTokens)`
            })
            break
          }
        }
        const t = yield* turn(request)
        const { ok, expected } = check(t.done)
        measured.push({ kind, round, position, turn: t, ok, expected, request: describeRequest(request) })
        const u = t.done.usage
        return `${kind} ${t.done.timings.firstTokenMillis}/${t.firstText?.toFixed(0) ?? "-"} ms (${u.reuse} ${u.reusedTokens}/${u.promptTokens})${ok ? "" : " UNEXPECTED"}`
      })

    for (let r = 0; r < ROUNDS; r++) {
      const parts: Array<string> = []
      for (let p = 0; p < KINDS.length; p++) parts.push(yield* runKind(KINDS[(r + p) % KINDS.length]!, r, p))
      console.log(`round ${r + 1} [${loadavg().split(" ").slice(0, 3).join(" ")}]: ${parts.join("; ")}`)
    }

    const of = (kind: Kind) => measured.filter((m) => m.kind === kind)
    const ttft = (kind: Kind) => of(kind).map((m) => m.turn.done.timings.firstTokenMillis)
    const wallFirst = (kind: Kind) => of(kind).flatMap((m) => (m.turn.firstText === undefined ? [] : [m.turn.firstText]))
    const cold = median(ttft("cold"))
    const coldWall = median(wallFirst("cold"))
    console.log(`\nbench model, 1 thread, batch 512, slots ${SLOTS}; follow-up TTFT, ${ROUNDS} rounds (firstTokenMillis = Done timings; wall = here, to the first Text chunk)`)
    console.log(
      `  ${"kind".padEnd(13)} ${"reuse".padEnd(13)} ${"reused/prompt".padStart(14)} ${"ttft med".padStart(9)} ${"ttft min".padStart(9)} ` +
        `${"wall med".padStart(9)} ${"wall min".padStart(9)} ${"cold/kind".padStart(10)} ${"(wall)".padStart(7)}`
    )
    for (const kind of KINDS) {
      const ms = of(kind)
      const reuses = [...new Set(ms.map((m) => m.turn.done.usage.reuse))].join(",")
      const reused = median(ms.map((m) => m.turn.done.usage.reusedTokens))
      const prompt = median(ms.map((m) => m.turn.done.usage.promptTokens))
      const t = ttft(kind)
      const w = wallFirst(kind)
      console.log(
        `  ${kind.padEnd(13)} ${reuses.padEnd(13)} ${`${reused}/${prompt}`.padStart(14)} ${median(t).toFixed(0).padStart(9)} ${min(t).toFixed(0).padStart(9)} ` +
          `${median(w).toFixed(0).padStart(9)} ${min(w).toFixed(0).padStart(9)} ${(cold / median(t)).toFixed(1).padStart(10)} ${(coldWall / median(w)).toFixed(1).padStart(7)}`
      )
    }
    const noText = measured.filter((m) => m.turn.firstText === undefined)
    if (noText.length > 0) console.log(`  note: ${noText.length} turns had no Text chunk (${noText.map((m) => `${m.kind}-${m.round}`).join(", ")})`)
    console.log(`  queueMillis medians: ${KINDS.map((k) => `${k} ${median(of(k).map((m) => m.turn.done.timings.queueMillis))}`).join(", ")}`)

    if (restoreParts.length > 0) {
      const f = (xs: ReadonlyArray<number>) => `${median(xs).toFixed(0)} ms (min ${min(xs).toFixed(0)})`
      const p = restoreParts
      console.log(`\nstate file of a ${median(p.map((x) => x.stateTokens))}-token conversation: ${(median(p.map((x) => x.fileBytes)) / MiB).toFixed(1)} MiB ` +
        `(${(median(p.map((x) => x.fileBytes)) / median(p.map((x) => x.stateTokens)) / 1024).toFixed(1)} KiB/token); Conversations' own file ${(median(p.map((x) => x.conversationFile)) / MiB).toFixed(1)} MiB, sidecar ${(median(p.map((x) => x.sidecarBytes)) / 1024).toFixed(1)} KiB`)
      console.log(`  engine saveState ${f(p.map((x) => x.saveState))}; sha256 of the file ${f(p.map((x) => x.sha256))}; engine restoreState ${f(p.map((x) => x.restoreState))}`)
      console.log(`  turn that evicts it (save + sha256 + sidecar inside, then a ~20-token prefill): firstTokenMillis ${f(p.map((x) => x.evictingTurn))}`)
      console.log(`  restored - continuation TTFT (medians): ${(median(ttft("restored")) - median(ttft("continuation"))).toFixed(0)} ms`)
    }
    if (prepares.length > 0) {
      console.log(`\nprepare (awaited): ${median(prepares.map((x) => x.ms)).toFixed(0)} ms median (min ${min(prepares.map((x) => x.ms)).toFixed(0)}), ` +
        `${median(prepares.map((x) => x.prepared))}/${median(prepares.map((x) => x.total))} tokens, complete ${prepares.filter((x) => x.complete).length}/${prepares.length}`)
    }

    const unexpected = measured.filter((m) => !m.ok)
    if (unexpected.length > 0) {
      console.log(`\nUNEXPECTED reuse (${unexpected.length}):`)
      for (const m of unexpected) {
        console.log(`  ${m.kind} round ${m.round + 1}: expected ${m.expected}; request ${m.request}; usage ${JSON.stringify(m.turn.done.usage)}`)
      }
    }
    console.log(`load average at end: ${loadavg()}`)
  })

const main = Effect.gen(function*() {
  const directory = yield* Effect.acquireRelease(
    Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "nativegen-bench-reuse-"))),
    (d) => Effect.sync(() => Fs.rmSync(d, { recursive: true, force: true }))
  )
  const RuntimeLive = Runtime.layerWithModels({ generation: ensureModel(benchModel("bench")), decision: ensureModel("decision") }, {
    conversationsDirectory: directory,
    worker: { child: { backend: benchBackend, threads: 1, batchSize: 512 }, stopTimeout: Duration.seconds(5) },
    admission: { contextCap: { generation: 4608, decision: 1024 }, workspaceReservationBytes: 64 * MiB },
    scheduler: { slots: SLOTS }
  })
  yield* program(directory).pipe(Effect.provide(RuntimeLive), Effect.provide(NodeFileSystem.layer))
}).pipe(Effect.scoped)

Effect.runPromise(main).catch((e) => {
  console.error(e)
  process.exit(1)
})
