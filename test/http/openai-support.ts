/**
 * For the OpenAI API tests: the official `openai` client (no retries) pointed at the test server
 * (support.ts's HttpTest), a request run through it, and the APIError of a request it refuses.
 */
import { assert } from "@effect/vitest"
import * as Effect from "effect/Effect"
import OpenAI from "openai"
import { HttpTest } from "./support.js"

export const client = Effect.map(HttpTest, ({ baseUrl }) => new OpenAI({ baseURL: `${baseUrl}/v1`, apiKey: "unused", maxRetries: 0 }))

/** The client's APIError for a request the server refuses. */
export const refusalOf = <A>(request: (client: OpenAI) => Promise<A>) =>
  Effect.flatMap(client, (openai) =>
    Effect.flip(Effect.tryPromise({
      try: () => request(openai),
      catch: (error) => {
        assert(error instanceof OpenAI.APIError, `an API error, not ${String(error)}`)
        return error
      }
    })))

/** What the client gives for `request`. */
export const call = <A>(request: (client: OpenAI) => Promise<A>) => Effect.flatMap(client, (openai) => Effect.promise(() => request(openai)))
