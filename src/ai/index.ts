/**
 * `nativegen/ai`: @effect/ai providers over nativegen's `Provider` (embedded or remote). Needs the
 * optional peer dependencies `@effect/ai` and `@effect/experimental`.
 *
 * ```ts
 * LanguageModel.generateText({ prompt: "Hello" }).pipe(
 *   Effect.provide(NativegenLanguageModel.layer({ maxTokens: 256 })),
 *   Effect.provide(Runtime.layer())
 * )
 * ```
 */
export * as NativegenLanguageModel from "./NativegenLanguageModel.js"
export * as NativegenTokenizer from "./NativegenTokenizer.js"
