// Supervisor APIs the operator console stands on; the same admin role and UserId
// header as the session administration routes.
import { Invalid } from '../../platform/errors.js'
import type { JsonRoute } from '../../platform/http.js'
import { enumParam, intParam, invalidParameter } from '../../gateway/query.js'
import { ATTENTION_REASONS, type AttentionReason } from '../supervision/attention.js'
import { decodeCursor, LISTING_STATES, type SessionDirectory } from '../supervision/session-directory.js'
import type { Presence } from '../supervision/session-watch.js'
import { ADMIN_BASE } from './admin.js'
import { userIdOf, uuidParam } from './common.js'

export const SESSIONS_PATH = '/engine/api/administration/sessions'

const idParam = (query: URLSearchParams, name: string) => {
  const raw = query.get(name)
  if (raw === null || raw === '') return undefined
  if (raw.length > 128) throw invalidParameter(name, `${name} must be at most 128 characters`)
  return raw
}

export function supervisionRoutes(directory: SessionDirectory, presence: Presence): JsonRoute[] {
  const listing: JsonRoute & { querySchema: string } = {
    method: 'get',
    path: SESSIONS_PATH,
    role: 'admin',
    tag: 'Session administration',
    summary: "The account's live and recently closed sessions, newest first, page by page (cursor)",
    requiredHeaders: ['UserId'],
    querySchema: 'supervision.sessions.query',
    responses: {
      '200': { description: 'A page of sessions', schema: 'supervision.sessions.page' },
      '400': { description: 'USER_ID_REQUIRED, INVALID_USER_ID or INVALID_PARAMETER (naming it)' },
      '401': { description: 'Missing or unknown apikey' },
      '403': { description: 'The key lacks the admin role' },
    },
    async handle(ctx) {
      userIdOf(ctx)
      const q = ctx.query
      const rawCursor = q.get('cursor')
      const cursor = rawCursor ? decodeCursor(rawCursor) : undefined
      if (rawCursor && !cursor) throw invalidParameter('cursor', 'cursor must be the nextCursor of a previous page')
      const page = await directory.list({
        accountId: ctx.principal.accountId,
        crewId: idParam(q, 'crewId'),
        agentId: idParam(q, 'agentId'),
        state: enumParam(q, 'state', LISTING_STATES),
        limit: intParam(q, 'limit', { min: 1, max: 500, fallback: 100 }),
        cursor,
      })
      // Presence: the supervisors whose watch streams of the session are open on this gateway.
      return { status: 200, body: { ...page, data: page.data.map(r => ({ ...r, watchers: presence.of(r.sessionId) })) } }
    },
  }
  const acknowledge: JsonRoute = {
    method: 'put',
    path: `${ADMIN_BASE}/:sessionId/attention/:reason`,
    role: 'admin',
    tag: 'Session administration',
    summary: `Acknowledge an attention flag of a live session (reason: ${ATTENTION_REASONS.join(', ')}); it stays listed as acknowledged until it is raised again`,
    requiredHeaders: ['UserId'],
    responses: {
      '200': { description: 'The flag, acknowledged by this UserId', schema: 'supervision.attention.flag' },
      '400': { description: 'USER_ID_REQUIRED, INVALID_USER_ID, INVALID_SESSION_ID or INVALID_ATTENTION_REASON' },
      '401': { description: 'Missing or unknown apikey' },
      '403': { description: 'The key lacks the admin role' },
      '404': { description: 'SESSION_NOT_FOUND (also for another account\'s session)' },
      '409': { description: 'ATTENTION_NOT_RAISED: the session has no unacknowledged flag of that reason (or has ended)' },
    },
    async handle(ctx) {
      const userId = userIdOf(ctx)
      const sessionId = uuidParam(ctx, 'sessionId', 'INVALID_SESSION_ID')
      const reason = ctx.params.reason ?? ''
      if (!(ATTENTION_REASONS as readonly string[]).includes(reason)) {
        throw new Invalid('INVALID_ATTENTION_REASON', `reason must be one of ${ATTENTION_REASONS.join(', ')}`, { field: 'reason' })
      }
      const flag = await directory.acknowledge(ctx.principal.accountId, sessionId, reason as AttentionReason, userId)
      return { status: 200, body: flag }
    },
  }
  return [listing, acknowledge]
}
