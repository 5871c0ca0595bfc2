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

/**
 * Teacher-forced log-likelihood of each label after `prompt`, with the prompt evaluated in one
 * call (one batch): the unchunked result that chunked decision scoring is compared with. On the
 * CPU by default; `gpu` evaluates on that backend (test:gpu: the engine's own figure on a GPU).
 */
export const referenceLabelLogLikelihoods = async (
  modelPath: string,
  prompt: ReadonlyArray<number>,
  labels: ReadonlyArray<string>,
  contextSize = 1024,
  gpu: false | "cuda" | "vulkan" | "metal" = false
): Promise<Map<string, number>> => {
  const llama = await getLlama({ build: "never", gpu, maxThreads: 1 })
  const model = await llama.loadModel({ modelPath })
  const context = await model.createContext({ contextSize, threads: 1, batchSize: contextSize })
  try {
    const sequence = context.getSequence()
    const before = prompt.slice(0, -1) as Array<Token>
    await sequence.evaluateWithoutGeneratingNewTokens(before)
    const result = new Map<string, number>()
    for (const label of labels) {
      const tokens = model.tokenize(label, false)
      const items = [prompt[prompt.length - 1]!, ...tokens.slice(0, -1)].map(
        (token) => [token as Token, { generateNext: { probabilities: true, options: { temperature: 0 } } }] as const
      )
      const outputs = await sequence.controlledEvaluate(items.map(([t, o]) => [t, o]))
      result.set(label, tokens.reduce((sum, token, i) => sum + Math.log(outputs[i]?.next?.probabilities?.get(token) ?? 0), 0))
      await sequence.eraseContextTokenRanges([{ start: before.length, end: sequence.nextTokenIndex }])
    }
    return result
  } finally {
    await context.dispose()
    await model.dispose()
    await llama.dispose()
  }
}
