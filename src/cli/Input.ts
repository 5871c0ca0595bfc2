/**
 * Parsing what users type, as pure functions: decision heads (`NAME=LABEL,LABEL`) and reap grace
 * periods. Each returns the value or the reason it is not one, in words that name the input.
 */
import * as Either from "effect/Either"
import type { DecisionHead } from "../domain/Inference.js"

/**
 * `sentiment=positive,negative,neutral` -> `{ name: "sentiment", labels: [...] }`. The name is
 * everything before the first `=`; labels are comma-separated, trimmed, non-empty and distinct.
 */
export const parseHead = (text: string): Either.Either<DecisionHead, string> => {
  const eq = text.indexOf("=")
  if (eq < 0) return Either.left(`--head ${JSON.stringify(text)}: expected NAME=LABEL,LABEL,...`)
  const name = text.slice(0, eq).trim()
  if (name === "") return Either.left(`--head ${JSON.stringify(text)}: the head has no name`)
  const labels = text.slice(eq + 1).split(",").map((label) => label.trim())
  if (labels.some((label) => label === "")) {
    return Either.left(`--head ${JSON.stringify(text)}: empty label (labels are separated by single commas)`)
  }
  const seen = new Set<string>()
  for (const label of labels) {
    if (seen.has(label)) return Either.left(`--head ${JSON.stringify(text)}: label ${JSON.stringify(label)} appears twice`)
    seen.add(label)
  }
  return Either.right({ name, labels })
}

/** Every head parsed, with distinct names. */
export const parseHeads = (texts: ReadonlyArray<string>): Either.Either<ReadonlyArray<DecisionHead>, string> => {
  if (texts.length === 0) return Either.left("give at least one --head NAME=LABEL,LABEL,...")
  const heads: Array<DecisionHead> = []
  for (const text of texts) {
    const head = parseHead(text)
    if (Either.isLeft(head)) return Either.left(head.left)
    if (heads.some((h) => h.name === head.right.name)) {
      return Either.left(`--head ${JSON.stringify(head.right.name)} is given twice`)
    }
    heads.push(head.right)
  }
  return Either.right(heads)
}
