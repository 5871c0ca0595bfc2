/**
 * OpenAI's request bodies as the Provider's GenerateRequest: messages (developer as system, text
 * parts joined, tool calls with parsed arguments, `reasoning_content` as reasoning), sampling,
 * stop strings, probabilities, tools and the tool choice, the response format and the thinking
 * switch. What has no faithful mapping is refused with a 400 naming the field. The maximum output
 * is left open when the client gives none (the route fills it from the admitted context).
 */
import * as Effect from "effect/Effect"
import type { ChatMessage, GenerateRequest, ResponseFormat, ToolDefinition } from "../../domain/Inference.js"
import { parseSupportedJsonSchema } from "../../domain/JsonSchemaSubset.js"
import { invalidField, type Refused } from "./Refused.js"
import type * as Requests from "./Requests.js"

/** How the client named each field a Provider refusal may name, where it differs from `field`. */
export type ParamNames = Readonly<Record<"maxTokens" | "messages" | "topProbabilities", string>>

export interface MappedChat {
  readonly request: GenerateRequest
  /**
   * The tool choice requires a call: the answer is JSON of `{"name", "arguments"}` decoded under a
   * grammar, returned to the client as a tool call.
   */
  readonly forcedToolCall: boolean
  readonly params: ParamNames
}

export interface MappedCompletion {
  readonly request: GenerateRequest
  readonly params: ParamNames
}

const absent = <A>(value: A | null | undefined): value is null | undefined => value === null || value === undefined

/** A message's content as text: a string, or text parts joined as they are. */
const contentText = (content: Requests.Content, at: string): Effect.Effect<string, Refused> => {
  if (typeof content === "string") return Effect.succeed(content)
  let text = ""
  for (const [j, part] of content.entries()) {
    if (part.type !== "text") {
      return Effect.fail(invalidField(`${at}[${j}].type`, `content part type ${JSON.stringify(part.type)} is not supported (only "text")`))
    }
    if (absent(part.text)) return Effect.fail(invalidField(`${at}[${j}].text`, "a text part needs its text"))
    text += part.text
  }
  return Effect.succeed(text)
}

const isJsonObject = (value: unknown): value is { readonly [key: string]: unknown } =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** An assistant's tool call as the template reads it: the arguments string parsed to an object. */
const toolCallOf = (call: typeof Requests.ToolCallIn.Type, at: string) =>
  Effect.gen(function*() {
    if (!absent(call.type) && call.type !== "function") {
      return yield* invalidField(`${at}.type`, `tool call type ${JSON.stringify(call.type)} is not supported (only "function")`)
    }
    let parsed: unknown
    try {
      parsed = JSON.parse(call.function.arguments)
    } catch {
      parsed = undefined
    }
    if (!isJsonObject(parsed)) return yield* invalidField(`${at}.function.arguments`, "must be a JSON object, as a string")
    return { ...(absent(call.id) ? {} : { id: call.id }), name: call.function.name, arguments: parsed }
  })

const messageOf = (message: Requests.Message, i: number): Effect.Effect<ChatMessage, Refused> =>
  Effect.gen(function*() {
    const at = `messages[${i}]`
    const content = absent(message.content) ? undefined : yield* contentText(message.content, `${at}.content`)
    if (!absent(message.tool_calls) && message.role !== "assistant") {
      return yield* invalidField(`${at}.tool_calls`, "only assistant messages carry tool calls")
    }
    switch (message.role) {
      case "system":
      case "developer":
      case "user":
      case "tool": {
        if (content === undefined) return yield* invalidField(`${at}.content`, `a ${message.role} message needs its content`)
        const role = message.role === "developer" ? "system" : message.role
        return role === "tool" && !absent(message.tool_call_id)
          ? { role, content, toolCallId: message.tool_call_id }
          : { role, content }
      }
      case "assistant": {
        const toolCalls = absent(message.tool_calls)
          ? []
          : yield* Effect.forEach(message.tool_calls, (call, j) => toolCallOf(call, `${at}.tool_calls[${j}]`))
        return {
          role: "assistant",
          content: content ?? "",
          ...(absent(message.reasoning_content) ? {} : { reasoning: message.reasoning_content }),
          ...(toolCalls.length === 0 ? {} : { toolCalls })
        }
      }
      default:
        return yield* invalidField(`${at}.role`, `role ${JSON.stringify(message.role)} is not supported (system, developer, user, assistant, tool)`)
    }
  })

const toolOf = (tool: Requests.Tool, i: number): Effect.Effect<ToolDefinition, Refused> =>
  tool.type !== "function"
    ? Effect.fail(invalidField(`tools[${i}].type`, `tool type ${JSON.stringify(tool.type)} is not supported (only "function")`))
    : Effect.succeed({
      name: tool.function.name,
      ...(absent(tool.function.description) ? {} : { description: tool.function.description }),
      parameters: tool.function.parameters ?? { type: "object", properties: {} }
    })

/** Which tools the model is offered, and which (if any) it must call. */
const toolChoiceOf = (choice: Requests.ToolChoice | null | undefined, tools: ReadonlyArray<ToolDefinition>) => {
  if (absent(choice) || choice === "auto") return Effect.succeed({ offered: tools, required: [] as ReadonlyArray<number> })
  if (choice === "none") return Effect.succeed({ offered: [], required: [] })
  if (choice === "required") {
    return tools.length === 0
      ? Effect.fail(invalidField("tool_choice", "\"required\" needs at least one tool in tools"))
      : Effect.succeed({ offered: tools, required: tools.map((_, i) => i) })
  }
  if (typeof choice === "string") {
    return Effect.fail(invalidField("tool_choice", `tool choice ${JSON.stringify(choice)} is not supported (none, auto, required, or a function)`))
  }
  if (choice.type !== "function") {
    return Effect.fail(invalidField("tool_choice.type", `tool choice type ${JSON.stringify(choice.type)} is not supported (only "function")`))
  }
  const index = tools.findIndex((t) => t.name === choice.function.name)
  return index < 0
    ? Effect.fail(invalidField("tool_choice.function.name", `no tool named ${JSON.stringify(choice.function.name)} in tools`))
    : Effect.succeed({ offered: tools, required: [index] })
}

/**
 * The JSON schema of a call to one of the required tools, `{"name": <const>, "arguments": <its
 * parameters>}`; parameters the grammar cannot express exactly are refused, naming the part.
 */
const forcedCallSchema = (tools: ReadonlyArray<ToolDefinition>, required: ReadonlyArray<number>) =>
  Effect.gen(function*() {
    const calls: Array<Record<string, unknown>> = []
    for (const i of required) {
      const tool = tools[i]!
      const check = parseSupportedJsonSchema(tool.parameters)
      if (check._tag === "Unsupported") {
        return yield* invalidField(
          `tools[${i}].function.parameters${check.path}`,
          `a required tool call is decoded under a JSON-schema grammar, which cannot express this: ${check.reason}`
        )
      }
      calls.push({
        type: "object",
        properties: { name: { const: tool.name }, arguments: check.schema },
        required: ["name", "arguments"],
        additionalProperties: false
      })
    }
    return calls.length === 1 ? calls[0]! : { oneOf: calls }
  })

const responseFormatOf = (format: Requests.ResponseFormat): Effect.Effect<ResponseFormat | undefined, Refused> => {
  switch (format.type) {
    case "text":
      return Effect.succeed(undefined)
    case "json_object":
      return Effect.succeed({ type: "json" })
    case "json_schema": {
      const schema = format.json_schema?.schema
      return absent(schema)
        ? Effect.fail(invalidField("response_format.json_schema.schema", "a json_schema response format needs its schema"))
        : Effect.succeed({ type: "jsonSchema", schema })
    }
    default:
      return Effect.fail(invalidField("response_format.type", `response format ${JSON.stringify(format.type)} is not supported (text, json_object, json_schema)`))
  }
}

/** False asks the template to skip thinking: `chat_template_kwargs.enable_thinking`, else `reasoning_effort: "none"`. */
const thinkingOf = (request: Requests.ChatCompletionRequest): Effect.Effect<boolean | undefined, Refused> => {
  const enable = request.chat_template_kwargs?.["enable_thinking"]
  if (enable !== undefined && enable !== null) {
    return typeof enable === "boolean"
      ? Effect.succeed(enable)
      : Effect.fail(invalidField("chat_template_kwargs.enable_thinking", "must be a boolean"))
  }
  return Effect.succeed(request.reasoning_effort === "none" ? false : undefined)
}

/** Sampling: greedy unless a temperature is given (the runtime's default, unlike OpenAI's 1). */
const samplingOf = (request: { readonly temperature?: number | null | undefined; readonly top_p?: number | null | undefined; readonly seed?: number | null | undefined }) =>
  absent(request.temperature) && absent(request.top_p) && absent(request.seed)
    ? {}
    : {
      sampling: {
        temperature: request.temperature ?? 0,
        ...(absent(request.top_p) ? {} : { topP: request.top_p }),
        ...(absent(request.seed) ? {} : { seed: request.seed })
      }
    }

const stopOf = (stop: string | ReadonlyArray<string> | null | undefined) =>
  absent(stop) ? {} : { stop: typeof stop === "string" ? [stop] : stop }

/** The client's output budget, or none (the rest of the admitted context). */
const maxTokensOf = (maxTokens: number | null | undefined) => absent(maxTokens) ? {} : { maxTokens }

const onlyOne = (n: number | null | undefined, param: string) =>
  absent(n) || n === 1 ? Effect.void : Effect.fail(invalidField(param, `only 1 choice is supported (${param} ${n})`))

export const chatRequest = (body: Requests.ChatCompletionRequest): Effect.Effect<MappedChat, Refused> =>
  Effect.gen(function*() {
    yield* onlyOne(body.n, "n")
    const messages = yield* Effect.forEach(body.messages, messageOf)
    const tools = absent(body.tools) ? [] : yield* Effect.forEach(body.tools, toolOf)
    const { offered, required } = yield* toolChoiceOf(body.tool_choice, tools)
    const format = absent(body.response_format) ? undefined : yield* responseFormatOf(body.response_format)
    if (required.length > 0 && format !== undefined) {
      return yield* invalidField("response_format", "a response format cannot be combined with a tool choice that requires a call")
    }
    const responseFormat: ResponseFormat | undefined = required.length > 0
      ? { type: "jsonSchema", schema: yield* forcedCallSchema(tools, required) }
      : format
    if (!absent(body.top_logprobs) && body.logprobs !== true) {
      return yield* invalidField("top_logprobs", "top_logprobs needs logprobs: true")
    }
    const thinking = yield* thinkingOf(body)
    const maxTokensParam = absent(body.max_completion_tokens) ? "max_tokens" : "max_completion_tokens"
    return {
      request: {
        messages,
        ...maxTokensOf(body.max_completion_tokens ?? body.max_tokens),
        ...samplingOf(body),
        ...stopOf(body.stop),
        ...(body.logprobs === true ? { probabilities: true, topProbabilities: body.top_logprobs ?? 0 } : {}),
        ...(offered.length === 0 ? {} : { tools: offered }),
        ...(thinking === undefined ? {} : { thinking }),
        ...(responseFormat === undefined ? {} : { responseFormat })
      },
      forcedToolCall: required.length > 0,
      params: { maxTokens: maxTokensParam, messages: "messages", topProbabilities: "top_logprobs" }
    }
  })

export const completionRequest = (body: Requests.CompletionRequest): Effect.Effect<MappedCompletion, Refused> =>
  Effect.gen(function*() {
    yield* onlyOne(body.n, "n")
    yield* onlyOne(body.best_of, "best_of")
    if (body.echo === true) return yield* invalidField("echo", "echo is not supported (only false)")
    if (!absent(body.suffix) && body.suffix !== "") return yield* invalidField("suffix", "suffix is not supported (insertion needs a fill-in-the-middle template)")
    const prompts = typeof body.prompt === "string" ? [body.prompt] : body.prompt
    if (prompts.length !== 1) return yield* invalidField("prompt", `one prompt is supported (a string, or an array of one string; got ${prompts.length})`)
    const prompt = prompts[0]!
    return {
      request: {
        messages: [],
        prompt,
        ...maxTokensOf(body.max_tokens),
        ...samplingOf(body),
        ...stopOf(body.stop),
        ...(absent(body.logprobs) ? {} : { probabilities: true, topProbabilities: body.logprobs })
      },
      params: { maxTokens: "max_tokens", messages: "prompt", topProbabilities: "logprobs" }
    }
  })
