/**
 * JSON-schema grammars for constrained sampling. A grammar is built once per schema text per model
 * (building turns the schema into GBNF and parses it natively) and kept in a small LRU per model;
 * each generation gets its own evaluation state. node-llama-cpp's JSON-schema grammar ends in four
 * newlines (its chat session stops on them); ours ends with the JSON value, so once the value is
 * complete the grammar allows only an end-of-generation token: the generation ends there.
 *
 * Under a grammar, every special token but end-of-generation is banned: llama.cpp's grammar matches
 * a special token by its text (`<think>` fits inside a JSON string), but the host reads special
 * tokens as channel markers or stops, and their text is never emitted.
 */
import * as Effect from "effect/Effect"
import {
  type GbnfJsonSchema,
  type Llama,
  type LlamaGrammar,
  LlamaGrammarEvaluationState,
  type LlamaModel,
  type Token,
  TokenBias
} from "node-llama-cpp"
import { EngineFailure, type InvalidEngineRequest } from "../../domain/EngineError.js"
import { parseSupportedJsonSchema } from "../../domain/JsonSchemaSubset.js"
import { invalid, reasonOf } from "./Checks.js"

/** Schemas whose grammar each model keeps (least recently used dropped first). */
export const MAX_CACHED_GRAMMARS = 32

/** What sampling under a grammar needs for one generation. */
export interface Constraint {
  readonly grammarEvaluationState: LlamaGrammarEvaluationState
  readonly tokenBias: TokenBias
}

/** The ending node-llama-cpp puts on its JSON-schema grammar's root rule (GBNF source text). */
const NEWLINES_ENDING = ` "\\n\\n\\n\\n" [\\n]*`

/** The GBNF of a schema, ending at the JSON value. */
const gbnfOf = (llama: Llama, schema: GbnfJsonSchema): Promise<string> =>
  llama.createGrammarForJsonSchema<GbnfJsonSchema>(schema).then(({ grammar }) => {
    const [root, ...rules] = grammar.split("\n")
    if (root === undefined || !root.startsWith("root ::= ") || !root.endsWith(NEWLINES_ENDING)) {
      throw new Error(`node-llama-cpp's JSON-schema grammar no longer ends its root rule with ${NEWLINES_ENDING}`)
    }
    return [root.slice(0, -NEWLINES_ENDING.length), ...rules].join("\n")
  })

interface PerModel {
  readonly grammars: Map<string, LlamaGrammar>
  banned: TokenBias | undefined
}

export interface Grammars {
  /** The constraint for one generation under the schema (its JSON text); built or taken from the cache. */
  readonly constraint: (model: LlamaModel, schemaText: string) => Effect.Effect<Constraint, InvalidEngineRequest | EngineFailure>
}

export const make = (llama: Llama): Grammars => {
  const perModel = new WeakMap<LlamaModel, PerModel>()

  const entryOf = (model: LlamaModel): PerModel => {
    let entry = perModel.get(model)
    if (entry === undefined) {
      entry = { grammars: new Map(), banned: undefined }
      perModel.set(model, entry)
    }
    return entry
  }

  /**
   * Every control or user-defined token of the model (what the host may read as a channel marker,
   * see Residents) except end-of-generation tokens, as a "never" bias (once per model).
   */
  const bannedOf = (model: LlamaModel, entry: PerModel): TokenBias => {
    if (entry.banned !== undefined) return entry.banned
    const bias = new TokenBias(model.tokenizer)
    // Qwen3's `<think>` is user-defined but not "special" to node-llama-cpp (it detokenizes to its
    // text), yet it is a marker: the attributes decide, as they do for the markers.
    for (const token of model.iterateAllTokens()) {
      const attributes = model.getTokenAttributes(token)
      if ((attributes.control || attributes.userDefined) && !model.isEogToken(token)) bias.set(token as Token, "never")
    }
    entry.banned = bias
    return bias
  }

  const grammarOf = (entry: PerModel, schemaText: string) =>
    Effect.gen(function*() {
      const cached = entry.grammars.get(schemaText)
      if (cached !== undefined) {
        // Most recently used last.
        entry.grammars.delete(schemaText)
        entry.grammars.set(schemaText, cached)
        return cached
      }
      const parsed = yield* Effect.try({
        try: (): unknown => JSON.parse(schemaText),
        catch: (cause) => invalid("jsonSchema", schemaText.slice(0, 200), `is not JSON: ${reasonOf(cause)}`)
      })
      // Checked against the subset the grammar expresses exactly (GbnfJsonSchema's shapes).
      const schema = parseSupportedJsonSchema(parsed)
      if (schema._tag === "Unsupported") return yield* Effect.fail(invalid(`jsonSchema${schema.path}`, schema.value, schema.reason))
      const grammar = yield* Effect.tryPromise({
        try: async () => llama.createGrammar({ grammar: await gbnfOf(llama, schema.schema as GbnfJsonSchema) }),
        catch: (cause) => new EngineFailure({ operation: "grammar", reason: reasonOf(cause) })
      })
      entry.grammars.set(schemaText, grammar)
      if (entry.grammars.size > MAX_CACHED_GRAMMARS) entry.grammars.delete(entry.grammars.keys().next().value!)
      return grammar
    })

  return {
    constraint: (model, schemaText) =>
      Effect.gen(function*() {
        const entry = entryOf(model)
        const grammar = yield* grammarOf(entry, schemaText)
        const tokenBias = bannedOf(model, entry)
        return yield* Effect.try({
          try: () => ({ grammarEvaluationState: new LlamaGrammarEvaluationState({ model, grammar }), tokenBias }),
          catch: (cause) => new EngineFailure({ operation: "grammar", reason: reasonOf(cause) })
        })
      })
  }
}
