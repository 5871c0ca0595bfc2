/**
 * In-process node-llama-cpp runs used as the reference that engine-child results must equal.
 * Test code only: the host never loads the engine.
 */
import { getLlama, type Token } from "node-llama-cpp"

/** Greedy tokens for `prompt`, evaluated in one call as a plain node-llama-cpp program would, up to EOG. */
export const referenceGreedy = async (
  modelPath: string,
  prompt: ReadonlyArray<number>,
  maxTokens: number,
  contextSize = 4096
): Promise<Array<number>> => {
  const llama = await getLlama({ build: "never", gpu: false, maxThreads: 1 })
  const model = await llama.loadModel({ modelPath })
  const context = await model.createContext({ contextSize, threads: 1, batchSize: 512 })
  try {
    const out: Array<number> = []
    for await (const token of context.getSequence().evaluate(prompt as Array<Token>, { temperature: 0 })) {
      if (model.isEogToken(token)) break
      out.push(token)
      if (out.length >= maxTokens) break
    }
    return out
  } finally {
    await context.dispose()
    await model.dispose()
    await llama.dispose()
  }
}

/** Token ids of a chat rendered by node-llama-cpp's own chat wrapper for the model (no tool turns). */
export const referenceChatTokens = async (
  modelPath: string,
  messages: ReadonlyArray<{ readonly role: "system" | "user" | "assistant"; readonly content: string }>
): Promise<Array<number>> => {
  const { resolveChatWrapper } = await import("node-llama-cpp")
  const llama = await getLlama({ build: "never", gpu: false, maxThreads: 1 })
  const model = await llama.loadModel({ modelPath, vocabOnly: true })
  try {
    const wrapper = resolveChatWrapper(model)!
    const chatHistory = [
      ...messages.map((m) =>
        m.role === "system"
          ? { type: "system" as const, text: m.content }
          : m.role === "user"
          ? { type: "user" as const, text: m.content }
          : { type: "model" as const, response: [m.content] }
      ),
      { type: "model" as const, response: [] }
    ]
    return wrapper.generateContextState({ chatHistory }).contextText.tokenize(model.tokenizer)
  } finally {
    await model.dispose()
    await llama.dispose()
  }
}
