/**
 * A nativegen generation as @effect/ai response parts. Streaming: the thought channel is a
 * `reasoning-start`/`-delta`/`-end` block, the answer a `text-*` block (a new block each time the
 * channel changes), and the `Done` chunk a `finish` part with the true reason (`length` when
 * maxTokens ran out, `stop` at the end of the turn or a stop string), the usage (cached input
 * tokens are the reused ones, reasoning tokens the thought channel's) and nativegen's own facts
 * under `metadata.nativegen` (stop reason, reuse kind, timings, checkpoint). Whole parts (for
 * `generateText`) are the same blocks joined.
 */
import type * as Response from "@effect/ai/Response"
import type { Checkpoint, GenerateChunk, ReuseKind, StopReason, Timings } from "../domain/Inference.js"

/** What nativegen reports about a generation, on its finish part as `metadata.nativegen`. */
export type NativegenMetadata = {
  readonly stopReason: StopReason
  /** How the prompt's cached part was reused (`continuation` for a continued conversation). */
  readonly reuse: ReuseKind
  readonly timings: Timings
  /** Hand it back (with the conversation) to continue the conversation from its cache. */
  readonly checkpoint?: Checkpoint | undefined
}

declare module "@effect/ai/Response" {
  export interface FinishPartMetadata extends ProviderMetadata {
    readonly nativegen?: NativegenMetadata | undefined
  }
}

export const finishReason = (reason: StopReason): Response.FinishReason => reason === "maxTokens" ? "length" : "stop"

type Done = Extract<GenerateChunk, { readonly _tag: "Done" }>

/**
 * Per-generation state turning chunks into stream parts, in order. `answer` is the answer text so
 * far (a continued conversation records it).
 */
export const streamState = () => {
  let open: { readonly kind: "text" | "reasoning"; readonly id: string } | undefined
  let blocks = 0
  let reasoningTokens = 0
  let answer = ""

  const close = (): Array<Response.StreamPartEncoded> => {
    if (open === undefined) return []
    const { id, kind } = open
    open = undefined
    return [kind === "text" ? { type: "text-end", id } : { type: "reasoning-end", id }]
  }

  const delta = (kind: "text" | "reasoning", text: string): Array<Response.StreamPartEncoded> => {
    const parts = open?.kind === kind ? [] : close()
    if (open === undefined) {
      const id = `${kind}-${blocks++}`
      open = { kind, id }
      parts.push(kind === "text" ? { type: "text-start", id } : { type: "reasoning-start", id })
    }
    const id = open.id
    parts.push(kind === "text" ? { type: "text-delta", id, delta: text } : { type: "reasoning-delta", id, delta: text })
    return parts
  }

  const finish = (done: Done): Response.FinishPartEncoded => ({
    type: "finish",
    reason: finishReason(done.stopReason),
    usage: {
      inputTokens: done.usage.promptTokens,
      outputTokens: done.usage.generatedTokens,
      totalTokens: done.usage.promptTokens + done.usage.generatedTokens,
      reasoningTokens,
      cachedInputTokens: done.usage.reusedTokens
    },
    metadata: {
      nativegen: {
        stopReason: done.stopReason,
        reuse: done.usage.reuse,
        timings: done.timings,
        ...(done.checkpoint === undefined ? {} : { checkpoint: done.checkpoint })
      }
    }
  })

  return {
    get answer() {
      return answer
    },
    /** The parts of one chunk. */
    parts: (chunk: GenerateChunk): Array<Response.StreamPartEncoded> => {
      if (chunk._tag === "Done") return [...close(), finish(chunk)]
      switch (chunk.channel) {
        case "thought":
          reasoningTokens += chunk.tokens.length
          return delta("reasoning", chunk.text)
        case "answer":
          answer += chunk.text
          return delta("text", chunk.text)
        case "tool":
          return []
      }
    }
  }
}

/** Stream parts as whole parts: each reasoning and text block joined into one part. */
export const wholeParts = (streamed: ReadonlyArray<Response.StreamPartEncoded>): Array<Response.PartEncoded> => {
  const parts: Array<Response.PartEncoded> = []
  let text: { kind: "text" | "reasoning"; value: string } | undefined
  for (const part of streamed) {
    switch (part.type) {
      case "text-start":
      case "reasoning-start":
        text = { kind: part.type === "text-start" ? "text" : "reasoning", value: "" }
        break
      case "text-delta":
      case "reasoning-delta":
        if (text !== undefined) text.value += part.delta
        break
      case "text-end":
      case "reasoning-end":
        if (text !== undefined) parts.push(text.kind === "text" ? { type: "text", text: text.value } : { type: "reasoning", text: text.value })
        text = undefined
        break
      case "finish":
      case "tool-call":
        parts.push(part)
        break
    }
  }
  return parts
}
