/**
 * What a loaded model really holds beyond llama.cpp's allocation plan, from its GGUF shape
 * (docs/decisions.md, "Admission charge against measured memory"):
 *
 * - `vocabularyBytes`: the tokenizer's structures (token texts, the text-to-id map, BPE merge
 *   ranks) and their JavaScript copy, which the plan does not count: about 372 bytes per vocabulary
 *   entry natively plus ~38 in JavaScript (Qwen3's 151,936 tokens and 151,387 merges: 107.5 MiB
 *   native, 11 MiB JavaScript, measured after a forced GC), charged at 410 per entry.
 * - `untouchedLogitsBytes`: on the CPU backend, the part of the compute buffer that is allocated
 *   but never resident. llama.cpp reserves the graph of a full batch with an output (a logits row
 *   of `vocabulary x 4` bytes) for every token, while the engine asks for one output per sequence
 *   (a label scoring: one per label token). The reserve is the peak over the graph's stages, so it
 *   is at least the logits of the full batch; what a real batch touches is at most its logits rows
 *   plus `activationBound`. The difference of the two is never touched (Qwen3's vocabulary at a
 *   512-token batch: 297 MiB reserved for logits, 13-15 MiB of the compute buffer resident).
 */
import { MAX_LABEL_TOKENS } from "../../domain/RequestRules.js"

/** The shape of a model that its resident memory depends on. */
export interface ModelShape {
  /** Tokens in the vocabulary: the width of a logits row. */
  readonly vocabularySize: number
  readonly embedding: number
  readonly feedForward: number
  readonly heads: number
  readonly kvHeads: number
  readonly headDim: number
}

/** Bytes charged per vocabulary entry (token or merge), as measured (the per-model bytes cover the rest). */
export const BYTES_PER_VOCABULARY_ENTRY = 410

/** Outputs a label scoring asks for in one batch at most: one per label token (Scoring.ts refuses longer labels). */
export const MAX_LABEL_OUTPUTS = MAX_LABEL_TOKENS

/** The largest padding llama.cpp applies to a batch's tokens in the attention mask. */
const MASK_PAD = 64

/** Bytes charged for a vocabulary of `entries` tokens and merges. */
export const vocabularyBytes = (entries: number): number => entries * BYTES_PER_VOCABULARY_ENTRY

/**
 * A bound on the activations one stage of a `batch`-token graph keeps live: the feed-forward
 * stage's gate, up and product (3 x feedForward) with the residual and its norm (2 x embedding),
 * and the attention stage's query, key and value projections with their normed/rotated copies
 * (2 x (heads + 2 kvHeads) x headDim), as if both stages were live at once, in f32; plus the
 * attention mask (f16, contextSize x padded batch).
 */
export const activationBound = (shape: ModelShape, batch: number, contextSize: number): number => {
  const perToken = 2 * shape.embedding + 3 * shape.feedForward + 2 * (shape.heads + 2 * shape.kvHeads) * shape.headDim
  const paddedBatch = Math.ceil(batch / MASK_PAD) * MASK_PAD
  return batch * perToken * 4 + contextSize * paddedBatch * 2
}

/**
 * Bytes of a CPU context's compute reserve that no batch of the engine touches: the full batch's
 * logits minus the rows a batch asks for and the activation bound (never negative).
 */
export const untouchedLogitsBytes = (
  shape: ModelShape,
  batch: number,
  contextSize: number,
  sequences: number
): number => {
  const row = shape.vocabularySize * 4
  const outputs = Math.min(batch, sequences + MAX_LABEL_OUTPUTS)
  return Math.max(0, row * batch - row * outputs - activationBound(shape, batch, contextSize * sequences))
}
