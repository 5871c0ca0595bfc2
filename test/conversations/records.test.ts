/**
 * The bounded token records (conversations/Records.ts), over random sequences of operations: the
 * bounds hold after every store unless only slot-resident records (and the one just stored) are
 * left; a slot-resident record is never dropped; whatever is dropped was used less recently than
 * every droppable record kept; the byte count is exact.
 */
import { assert, describe, it } from "@effect/vitest"
import * as fc from "effect/FastCheck"
import * as Records from "../../src/services/conversations/Records.js"

const ids = Array.from({ length: 12 }, (_, i) => `conversation-${i}`)

type Op =
  | { readonly kind: "set"; readonly conversation: string; readonly tokens: number; readonly slot: number | undefined }
  | { readonly kind: "get"; readonly conversation: string }
  | { readonly kind: "release"; readonly conversation: string }

const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({
    kind: fc.constant("set" as const),
    conversation: fc.constantFrom(...ids),
    tokens: fc.nat({ max: 600 }),
    slot: fc.option(fc.integer({ min: 0, max: 2 }), { nil: undefined })
  }),
  fc.record({ kind: fc.constant("get" as const), conversation: fc.constantFrom(...ids) }),
  fc.record({ kind: fc.constant("release" as const), conversation: fc.constantFrom(...ids) })
)

const bounds = fc.record({ maxConversations: fc.integer({ min: 1, max: 8 }), maxBytes: fc.integer({ min: 200, max: 8_000 }) })

describe("Records", () => {
  it.prop("bounds by count and bytes, least recently used first, never a slot-resident record", [bounds, fc.array(op, { maxLength: 200 })], ([limits, ops]) => {
    const records = Records.make(limits)
    /** When each conversation was last stored or read (the test's own clock). */
    const used = new Map<string, number>()
    let clock = 0
    for (const o of ops) {
      if (o.kind === "get") {
        if (records.get(o.conversation) !== undefined) used.set(o.conversation, ++clock)
        continue
      }
      if (o.kind === "release") {
        records.release(o.conversation)
        continue
      }
      const pinnedBefore = new Set(Array.from(records.entries()).flatMap(([c, h]) => (h.slot === undefined ? [] : [c])))
      const held = { tokens: new Uint32Array(o.tokens), slot: o.slot, incarnation: 1 }
      const dropped = records.set(o.conversation, held)
      used.set(o.conversation, ++clock)
      const kept = Array.from(records.entries())
      assert.strictEqual(records.peek(o.conversation), held, "the record just stored is kept")
      for (const c of dropped) {
        assert.isFalse(pinnedBefore.has(c) && c !== o.conversation, `slot-resident ${c} was dropped`)
        assert.isUndefined(records.peek(c))
        // Every droppable record kept was used more recently than any dropped one.
        for (const [k, h] of kept) if (h.slot === undefined && k !== o.conversation) assert.isAbove(used.get(k)!, used.get(c)!)
      }
      const overBounds = records.size() > limits.maxConversations || records.bytes() > limits.maxBytes
      if (overBounds) {
        assert.isTrue(kept.every(([c, h]) => h.slot !== undefined || c === o.conversation), "over the bounds only with nothing droppable left")
      }
      assert.strictEqual(records.bytes(), kept.reduce((sum, [c, h]) => sum + Records.bytesOf(c, h), 0))
    }
  })

  it("a released record keeps its place in the order", () => {
    const records = Records.make({ maxConversations: 2, maxBytes: 1_000_000 })
    records.set("a", { tokens: new Uint32Array(1), slot: 0, incarnation: 1 })
    records.set("b", { tokens: new Uint32Array(1), slot: undefined, incarnation: 1 })
    records.release("a")
    // "a" is the least recently used and no longer in a slot: it goes first.
    assert.deepStrictEqual(records.set("c", { tokens: new Uint32Array(1), slot: undefined, incarnation: 1 }), ["a"])
  })
})
