// A route's request body, checked against its schema before the handler runs (schema-first: the
// schema named by `requestSchema` is the validation, the handler's type and the OpenAPI entry).
import { Invalid } from '../platform/errors.js'
import type { RequestContext, Route } from '../platform/http.js'
import { schemas, type ValidationIssue } from '../schemas/index.js'
import { bodyBounds } from '../schemas/body-bounds.js'
import type { JsonShapeLimits } from './request.js'

/** Room for whitespace beyond a body's compact bound (pretty-printed bodies), and what a route without a schema takes. */
const BODY_ALLOWANCE_BYTES = 64 * 1024

/** What a route's body may be before it is parsed; past it, 413 (schemas/body-bounds.ts). */
export interface BodyLimits {
  bytes: number
  json: JsonShapeLimits
}

/**
 * A route's body limits, from its schema: twice the compact size of the largest valid body plus
 * 64 KiB (whitespace), never more than MAX_BODY_BYTES; the values and longest string a valid body
 * can hold. A route without a schema reads no body: 64 KiB of one is let by unread.
 */
export function bodyLimitsOf(route: Route, edge: { maxBodyBytes: number; maxJsonDepth: number }): BodyLimits {
  if (route.requestSchema === undefined) return { bytes: Math.min(edge.maxBodyBytes, BODY_ALLOWANCE_BYTES), json: { maxDepth: edge.maxJsonDepth } }
  const bounds = bodyBounds(schemas.all.get(route.requestSchema)!, ref => schemas.all.get(ref))
  return {
    bytes: Math.min(edge.maxBodyBytes, 2 * bounds.bytes + BODY_ALLOWANCE_BYTES),
    json: { maxDepth: edge.maxJsonDepth, maxValues: bounds.values, maxStringBytes: bounds.string },
  }
}

/** How many problems the error's message names; `details` lists them all. */
const NAMED_IN_MESSAGE = 3

/** Bodies of more keys and elements than this that are invalid get their first problem, not every one (schemas/validator.ts). */
export const EVERY_PROBLEM_UP_TO = 2000

/**
 * The body the route's handler reads as `ctx.input`: parsed and valid, or a 400
 * VALIDATION_FAILED that lists every problem. Undefined for a route without a schema, or one
 * whose handler checks the body itself.
 */
export function validatedInput(route: Route, ctx: RequestContext): unknown {
  if (route.requestSchema === undefined || route.bodyCheckedByHandler) return undefined
  let data = ctx.json()
  if (data === undefined) {
    if (!route.bodyOptional) {
      throw new Invalid('VALIDATION_FAILED', 'A JSON body is required', { details: [{ field: '(body)', code: 'REQUIRED', reason: 'A JSON body is required' }] })
    }
    data = {}
  }
  const issues = schemas.validate(route.requestSchema, data, '', { everyProblemUpTo: EVERY_PROBLEM_UP_TO })
  if (issues.length > 0) throw new Invalid('VALIDATION_FAILED', invalidBodyMessage(issues), { details: issues })
  return data
}

function invalidBodyMessage(issues: ValidationIssue[]): string {
  const named = issues.slice(0, NAMED_IN_MESSAGE).map(issue => issue.reason)
  const more = issues.length - named.length
  return `The request body is invalid: ${named.join('; ')}${more > 0 ? ` (and ${more} more)` : ''}`
}
