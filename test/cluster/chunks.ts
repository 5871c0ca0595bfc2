/** Generation chunks for the cluster's stream tests: a text chunk of given tokens, and a Done. */
import type { GenerateChunk } from "../../src/domain/Inference.js"

export const text = (tokens: ReadonlyArray<number>): GenerateChunk => ({ _tag: "Text", channel: "answer", text: tokens.join(" "), tokens })

export const done: GenerateChunk = {
  _tag: "Done",
  stopReason: "maxTokens",
  usage: { promptTokens: 3, reusedTokens: 0, generatedTokens: 0, reuse: "cold" },
  timings: { queueMillis: 0, firstTokenMillis: 0, decodeTokensPerSecond: 0, totalMillis: 0 }
}
