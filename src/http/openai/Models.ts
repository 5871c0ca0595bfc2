/**
 * The generation model as OpenAI's model object: its name is the id, `owned_by` is nativegen, and
 * a `nativegen` object tells its manifest digest, revision, admitted context and cap. `created` is
 * when the running engine started (the model has been served since then).
 */
import type { Readiness } from "../../domain/Inference.js"
import { type Refusal } from "../Refusals.js"

export type RoleReadiness = Readiness["roles"][number]

/** The generation role's readiness, when the runtime has one. */
export const generationModel = (readiness: Readiness): RoleReadiness | undefined => readiness.roles.find((r) => r.role === "generation")

export const modelObject = (role: RoleReadiness, readiness: Readiness, now: number) => ({
  id: role.model,
  object: "model",
  created: Math.floor((now - readiness.engine.uptimeMillis) / 1000),
  owned_by: "nativegen",
  nativegen: {
    role: role.role,
    manifest_digest: role.manifestDigest,
    revision: role.revision,
    admitted_context: role.admittedContext,
    context_cap: role.contextCap,
    limited_by: role.limitedBy
  }
})

/** OpenAI's 404 for a model it does not serve. */
export const modelNotFound = (model: string): Refusal => ({
  status: 404,
  type: "invalid_request_error",
  code: "model_not_found",
  param: "model",
  message: `The model \`${model}\` does not exist or you do not have access to it.`
})
