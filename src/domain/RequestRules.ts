/**
 * The rules a public request must keep, as Schema refinements of the domain schemas: checked once
 * where a request enters (the Provider's entry, which the RPC handlers call), each broken rule an
 * issue at the field it names. The wire schemas stay structural, so a client can send any request
 * and receive the typed refusal. Rules run after the structure (and field types) are valid.
 */
import * as Schema from "effect/Schema"
import { type ChatMessage, CountRequest, DecideRequest, GenerateRequest, PrepareRequest, type ToolDefinition } from "./Inference.js"

/** Most heads in one decision request, and most stop strings in one generation. */
export const MAX_HEADS = 16
export const MAX_STOP_STRINGS = 16
/**
 * Longest stop string, in characters: the output holds back any suffix that could still grow into
 * one, and checks every stop string's prefixes against it at each piece of text (per token).
 */
export const MAX_STOP_STRING = 256
/** Most labels in one head: the decision's one engine step scores every label in turn. */
export const MAX_LABELS = 64
/**
 * Longest label, in tokens of the decision model: the engine scores a label as one batch with an
 * output per token, and admission reserves the logits of that many outputs and no more (its CPU
 * context charge, src/native/engine/ResidentMemory.ts). Checked once the label is tokenized.
 */
export const MAX_LABEL_TOKENS = 32
/** Longest head name, in characters (it comes back with every label's result). */
export const MAX_HEAD_NAME = 256
/** Most candidates per step a generation may ask for (`topProbabilities`), as OpenAI allows. */
export const MAX_TOP_PROBABILITIES = 20
/** Longest conversation id. */
export const MAX_CONVERSATION_ID = 256
/**
 * Most tools in one generation, and most bytes of their JSON (names, descriptions, schemas): the
 * template writes all of them into every prompt.
 */
export const MAX_TOOLS = 64
export const MAX_TOOLS_BYTES = 64 * 1024
/** A tool name as OpenAI-style APIs accept it (and as it can be written into a template unquoted). */
export const TOOL_NAME = /^[A-Za-z0-9_.-]{1,64}$/

/** A rule: undefined when kept, else the field (a path) and the rule it breaks. */
type Rule<A> = (request: A) => Schema.FilterIssue | undefined

const broken = (path: ReadonlyArray<PropertyKey>, message: string): Schema.FilterIssue => ({ path, message })

/** The first rule the request breaks, as one refinement. */
const rules = <A>(...checks: ReadonlyArray<Rule<A>>) => (request: A): Schema.FilterIssue | undefined => {
  for (const check of checks) {
    const issue = check(request)
    if (issue !== undefined) return issue
  }
  return undefined
}

const someMessages = (path: ReadonlyArray<PropertyKey>, messages: ReadonlyArray<ChatMessage>) =>
  messages.length === 0 ? broken(path, "at least one message is needed") : undefined

/** Reasoning and tool calls belong to assistant messages, a tool call id to tool messages. */
const messageRoles = (path: ReadonlyArray<PropertyKey>, messages: ReadonlyArray<ChatMessage>) => {
  for (const [i, message] of messages.entries()) {
    if (message.role !== "assistant" && (message.reasoning !== undefined || message.toolCalls !== undefined)) {
      return broken([...path, i, "role"], "only assistant messages carry reasoning or tool calls")
    }
    if (message.role !== "tool" && message.toolCallId !== undefined) {
      return broken([...path, i, "toolCallId"], "only tool messages answer a tool call")
    }
  }
  return undefined
}

/** Tools: at most MAX_TOOLS, MAX_TOOLS_BYTES of JSON in all, names valid and unique, object schemas. */
const toolRules = (tools: ReadonlyArray<ToolDefinition> | undefined) => {
  if (tools === undefined) return undefined
  if (tools.length > MAX_TOOLS) return broken(["tools"], `at most ${MAX_TOOLS} tools`)
  let json: string
  try {
    json = JSON.stringify(tools)
  } catch {
    return broken(["tools"], "tool definitions must be JSON values")
  }
  if (new TextEncoder().encode(json).length > MAX_TOOLS_BYTES) {
    return broken(["tools"], `at most ${MAX_TOOLS_BYTES} bytes of tool definitions (JSON)`)
  }
  const names = new Set<string>()
  for (const [i, tool] of tools.entries()) {
    if (!TOOL_NAME.test(tool.name)) return broken(["tools", i, "name"], "must be 1 to 64 letters, digits, '_', '.' or '-'")
    if (names.has(tool.name)) return broken(["tools", i, "name"], "tool names must be unique")
    names.add(tool.name)
    if (tool.parameters["type"] !== "object") return broken(["tools", i, "parameters"], "must be a JSON schema of type \"object\"")
  }
  return undefined
}

/**
 * A plain-text prompt stands in for the chat: no messages, and nothing that only a chat template
 * reads (tools, thinking) or that continues a chat (a checkpoint; a conversation id still gives
 * prefix reuse in its slot).
 */
const plainPrompt = (r: GenerateRequest) =>
  r.prompt === undefined
    ? undefined
    : r.prompt.length === 0
    ? broken(["prompt"], "must not be empty")
    : r.messages.length > 0
    ? broken(["messages"], "must be empty with a plain-text prompt")
    : r.checkpoint !== undefined
    ? broken(["checkpoint"], "a plain-text prompt continues no checkpoint (a conversation id gives prefix reuse)")
    : r.tools !== undefined
    ? broken(["tools"], "tools are written by the chat template, which a plain-text prompt does not use")
    : r.thinking !== undefined
    ? broken(["thinking"], "thinking is the chat template's choice, which a plain-text prompt does not use")
    : undefined

/** Top probabilities: 0 to MAX_TOP_PROBABILITIES, and above 0 only with probabilities. */
const topProbabilities = (r: GenerateRequest) =>
  r.topProbabilities === undefined
    ? undefined
    : !Number.isInteger(r.topProbabilities) || r.topProbabilities < 0 || r.topProbabilities > MAX_TOP_PROBABILITIES
    ? broken(["topProbabilities"], `must be an integer from 0 to ${MAX_TOP_PROBABILITIES}`)
    : r.topProbabilities > 0 && r.probabilities !== true
    ? broken(["topProbabilities"], `needs probabilities: true (the most probable tokens, at most ${MAX_TOP_PROBABILITIES}, come with each token's probability)`)
    : undefined

const conversationId = (conversation: string | undefined) =>
  conversation !== undefined && (conversation.length === 0 || conversation.length > MAX_CONVERSATION_ID)
    ? broken(["conversation"], `must be 1 to ${MAX_CONVERSATION_ID} characters`)
    : undefined

export const ValidGenerateRequest = GenerateRequest.pipe(Schema.filter(rules<GenerateRequest>(
  (r) => (r.prompt === undefined ? someMessages(["messages"], r.messages) : plainPrompt(r)),
  (r) => messageRoles(["messages"], r.messages),
  (r) => toolRules(r.tools),
  (r) =>
    r.maxTokens === undefined || (Number.isSafeInteger(r.maxTokens) && r.maxTokens > 0)
      ? undefined
      : broken(["maxTokens"], "must be a positive integer"),
  (r) =>
    (r.stop?.length ?? 0) > MAX_STOP_STRINGS ? broken(["stop"], `at most ${MAX_STOP_STRINGS} stop strings`) : undefined,
  (r) => (r.stop?.some((s) => s.length === 0) ? broken(["stop"], "a stop string must not be empty") : undefined),
  (r) => {
    const i = r.stop?.findIndex((s) => s.length > MAX_STOP_STRING) ?? -1
    return i < 0 ? undefined : broken(["stop", i], `a stop string has at most ${MAX_STOP_STRING} characters`)
  },
  ({ sampling }) =>
    sampling === undefined
      ? undefined
      : !(sampling.temperature >= 0) || !Number.isFinite(sampling.temperature)
      ? broken(["sampling", "temperature"], "must be a finite number >= 0")
      : sampling.topK !== undefined && sampling.topK < 0
      ? broken(["sampling", "topK"], "must be >= 0")
      : sampling.topP !== undefined && !(sampling.topP > 0 && sampling.topP <= 1)
      ? broken(["sampling", "topP"], "must be in (0, 1]")
      : undefined,
  (r) => topProbabilities(r),
  (r) => conversationId(r.conversation)
)))

export const ValidDecideRequest = DecideRequest.pipe(Schema.filter(rules<DecideRequest>(
  (r) => (r.heads.length === 0 ? broken(["heads"], "at least one head is needed") : undefined),
  (r) => (r.heads.length > MAX_HEADS ? broken(["heads"], `at most ${MAX_HEADS} heads`) : undefined),
  (r) => {
    const i = r.heads.findIndex((h) => h.name.length > MAX_HEAD_NAME)
    return i < 0 ? undefined : broken(["heads", i, "name"], `a head name has at most ${MAX_HEAD_NAME} characters`)
  },
  (r) => {
    const i = r.heads.findIndex((h) => h.labels.length > MAX_LABELS)
    return i < 0 ? undefined : broken(["heads", i, "labels"], `at most ${MAX_LABELS} labels in a head`)
  },
  (r) =>
    typeof r.prompt !== "string"
      ? someMessages(["prompt"], r.prompt)
      : r.prompt.length === 0
      ? broken(["prompt"], "must not be empty")
      : undefined
)))

export const ValidCountRequest = CountRequest.pipe(Schema.filter(rules<CountRequest>(
  (r) => ((r.messages === undefined) === (r.text === undefined) ? broken([], "give exactly one of messages or text") : undefined),
  (r) => (r.messages === undefined ? undefined : someMessages(["messages"], r.messages))
)))

export const ValidPrepareRequest = PrepareRequest.pipe(Schema.filter(rules<PrepareRequest>(
  (r) => conversationId(r.conversation),
  (r) => someMessages(["history"], [...r.prefix, ...r.history])
)))
