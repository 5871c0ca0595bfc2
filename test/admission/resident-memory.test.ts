/**
 * The CPU compute discount never charges less than a batch can touch: for any model shape, batch,
 * context and sequence count, and any compute reserve at least the full batch's logits (the
 * reserve is the peak over the graph's stages, the logits stage among them), what is charged
 * (reserve minus the untouched part) covers the logits rows a batch asks for plus the activation
 * bound, or the whole reserve when that is smaller.
 */
import { assert, describe, it } from "@effect/vitest"
import * as fc from "effect/FastCheck"
import {
  activationBound,
  MAX_LABEL_OUTPUTS,
  type ModelShape,
  untouchedLogitsBytes
} from "../../src/native/engine/ResidentMemory.js"

const shape: fc.Arbitrary<ModelShape> = fc.record({
  vocabularySize: fc.integer({ min: 1, max: 300_000 }),
  embedding: fc.integer({ min: 1, max: 8192 }),
  feedForward: fc.integer({ min: 1, max: 32_768 }),
  heads: fc.integer({ min: 1, max: 64 }),
  kvHeads: fc.integer({ min: 1, max: 64 }),
  headDim: fc.integer({ min: 1, max: 256 })
})

describe("ResidentMemory", () => {
  it.prop(
    "the charged compute covers what a batch touches",
    {
      shape,
      batch: fc.integer({ min: 1, max: 2048 }),
      contextSize: fc.integer({ min: 1, max: 131_072 }),
      sequences: fc.integer({ min: 1, max: 16 }),
      extra: fc.nat({ max: 1 << 30 })
    },
    ({ batch, contextSize, extra, sequences, shape }) => {
      const row = shape.vocabularySize * 4
      const reserve = row * batch + extra
      const untouched = untouchedLogitsBytes(shape, batch, contextSize, sequences)
      const outputs = Math.min(batch, sequences + MAX_LABEL_OUTPUTS)
      const touched = Math.min(reserve, row * outputs + activationBound(shape, batch, contextSize * sequences))
      assert.isAtLeast(untouched, 0)
      assert.isAtLeast(reserve - untouched, touched)
    }
  )

  it.prop(
    "a batch that asks for an output per token discounts nothing",
    { shape, batch: fc.integer({ min: 1, max: MAX_LABEL_OUTPUTS }), contextSize: fc.integer({ min: 1, max: 65_536 }) },
    ({ batch, contextSize, shape }) => {
      assert.strictEqual(untouchedLogitsBytes(shape, batch, contextSize, 1), 0)
    }
  )
})
