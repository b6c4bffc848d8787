// Small request helpers shared by the channel and administration routes.
import { Invalid } from '../../platform/errors.js'
import type { RequestContext } from '../../platform/http.js'
import { isUuid } from '../../platform/ids.js'

export function uuidParam(ctx: RequestContext, name: string, code: string): string {
  const value = ctx.params[name] ?? ''
  if (!isUuid(value)) throw new Invalid(code, `${name} must be a UUID, got "${value.slice(0, 80)}"`)
  return value.toLowerCase()
}

const USER_ID = /^[\x21-\x7e](?:[\x20-\x7e]{0,126}[\x21-\x7e])?$/

/** Administration requires a UserId header (who did it, recorded in the history). */
export function userIdOf(ctx: RequestContext): string {
  const raw = ctx.headers['userid']
  if (raw === undefined || raw.trim() === '') throw new Invalid('USER_ID_REQUIRED', 'The UserId header is required for administration requests')
  if (!USER_ID.test(raw)) {
    throw new Invalid('INVALID_USER_ID', 'UserId must be 1 to 128 printable ASCII characters, without leading or trailing spaces')
  }
  return raw
}
