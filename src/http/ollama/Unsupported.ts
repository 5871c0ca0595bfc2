/**
 * Ollama's endpoints that do not map onto nativegen, each answered 501 in Ollama's error shape
 * with why and what to use instead: models come into nativegen only as signed manifests through
 * its store, and it serves generation and decision models, not embeddings.
 */
import type { Refusal } from "../Refusals.js"

const storeOnly = (what: string) =>
  `${what} is not supported: nativegen serves signed models from its store; ` +
  "import one with `nativegen store import --manifest <model.manifest.json> <model.gguf>` " +
  "(signed with `nativegen keys sign`)"

/** The paths (any method) and why each does not map. */
export const endpoints: ReadonlyArray<readonly [path: `/api/${string}`, reason: string]> = [
  ["/api/pull", storeOnly("pulling a model")],
  ["/api/push", "pushing a model is not supported: nativegen has no model registry; its store holds signed manifests"],
  ["/api/create", storeOnly("creating a model")],
  ["/api/blobs/*", storeOnly("uploading a blob")],
  ["/api/copy", "copying a model is not supported: a model's name comes from its signed manifest (`nativegen store list`)"],
  [
    "/api/delete",
    "deleting a model is not supported: activate another revision (`nativegen store activate`), then `nativegen store reap` removes unused blobs"
  ],
  ["/api/embed", "embeddings are not supported: nativegen serves generation and decision models"],
  ["/api/embeddings", "embeddings are not supported: nativegen serves generation and decision models"]
]

export const refusal = (reason: string): Refusal => ({
  status: 501,
  type: "invalid_request_error",
  code: "not_supported",
  param: null,
  message: reason
})
