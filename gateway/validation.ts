// A route's request body, checked against its schema before the handler runs (schema-first: the
// schema named by `requestSchema` is the validation, the handler's type and the OpenAPI entry).
import { Invalid } from '../platform/errors.js'
import type { RequestContext, Route } from '../platform/http.js'
import { schemas, type ValidationIssue } from '../schemas/index.js'

/** How many problems the error's message names; `details` lists them all. */
const NAMED_IN_MESSAGE = 3

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
  const issues = schemas.validate(route.requestSchema, data)
  if (issues.length > 0) throw new Invalid('VALIDATION_FAILED', invalidBodyMessage(issues), { details: issues })
  return data
}

function invalidBodyMessage(issues: ValidationIssue[]): string {
  const named = issues.slice(0, NAMED_IN_MESSAGE).map(issue => issue.reason)
  const more = issues.length - named.length
  return `The request body is invalid: ${named.join('; ')}${more > 0 ? ` (and ${more} more)` : ''}`
}
