/**
 * The benchmark's prompts: deterministic text of common English words (about one Qwen3 token each
 * after a space) from a seed, so that every round and side gets prompts of the same shape and no
 * two rounds share a prefix by accident; and the ~4,000-token conversation of the reuse figure.
 */
import * as Crypto from "node:crypto"

export interface Message {
  readonly role: "system" | "user" | "assistant"
  readonly content: string
}

const WORDS = (
  "the of and to in is it you that he was for on are with as his they be at one have this from " +
  "or had by word but what some we can out other were all there when up use your how said an each " +
  "she which do their time if will way about many then them write would like so these her long make " +
  "thing see him two has look more day could go come did number sound no most people my over know " +
  "water than call first who may down side been now find any new work part take get place made live"
).split(" ")

/** `n` words from `seed` (xorshift over the seed's sha256). */
export const wordsOf = (seed: string, n: number): string => {
  const hash = Crypto.createHash("sha256").update(seed).digest()
  let x = hash.readUInt32LE(0) | 1
  const out: Array<string> = []
  for (let i = 0; i < n; i++) {
    x ^= x << 13
    x ^= x >>> 17
    x ^= x << 5
    out.push(WORDS[(x >>> 0) % WORDS.length]!)
  }
  return out.join(" ")
}

/** One user message of about `words` tokens. */
export const userPrompt = (seed: string, words: number): ReadonlyArray<Message> => [{ role: "user", content: wordsOf(seed, words) }]

/** The ~3,800-token history (system, user, assistant, user) of a conversation. */
export const history = (seed: string, words = 3800): ReadonlyArray<Message> => [
  { role: "system", content: wordsOf(`${seed}/system`, Math.round(words * 0.1)) },
  { role: "user", content: wordsOf(`${seed}/user1`, Math.round(words * 0.4)) },
  { role: "assistant", content: wordsOf(`${seed}/assistant1`, Math.round(words * 0.3)) },
  { role: "user", content: wordsOf(`${seed}/user2`, Math.round(words * 0.2)) }
]

/** The follow-up turn: the history, the reply it got, and a new user message of about `words` tokens. */
export const followUp = (seed: string, previous: ReadonlyArray<Message>, reply: string, words = 200): ReadonlyArray<Message> => [
  ...previous,
  { role: "assistant", content: reply },
  { role: "user", content: wordsOf(`${seed}/user3`, words) }
]

/**
 * A single user message in Qwen3's ChatML, as its template renders it with the generation prompt
 * (for the in-process loop, which takes text, not messages).
 */
export const chatMl = (messages: ReadonlyArray<Message>): string =>
  messages.map((m) => `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`).join("") + "<|im_start|>assistant\n"
