/**
 * A request the OpenAI routes refuse, as local control flow: the refusal (status, code, param,
 * message) travels to the route's edge, where it is written in OpenAI's error shape.
 */
import * as Data from "effect/Data"
import { badRequest, type Refusal } from "../Refusals.js"

export class Refused extends Data.TaggedError("Refused")<{ readonly refusal: Refusal }> {}

/** A 400 naming the request field at fault (OpenAI's `param`). */
export const invalidField = (param: string, message: string, code = "invalid_value") =>
  new Refused({ refusal: badRequest(message, param, code) })
