// Session administration (spec 4.3): live supervisor operations on one session. Every route
// needs the admin role and a UserId header, which the history records.
import { Invalid } from '../../platform/errors.js'
import type { JsonRoute, RequestContext, Route } from '../../platform/http.js'
import type { ContextMessageInput } from '../session/machine.js'
import type { SessionCommand, SessionTransport } from '../transport.js'
import { body, userIdOf, uuidParam } from './common.js'

export const ADMIN_BASE = '/engine/api/administration/session'
const tag = 'Session administration'

const errors = {
  '400': { description: 'USER_ID_REQUIRED, INVALID_USER_ID, INVALID_SESSION_ID, VALIDATION_FAILED, ...' },
  '401': { description: 'Missing or unknown apikey' },
  '403': { description: 'The key lacks the admin role' },
  '404': { description: 'SESSION_NOT_FOUND (missing, destroyed, or another account\'s)' },
  '409': { description: 'INVALID_SESSION_STATE: the operation is not allowed in the session\'s current state' },
  '500': { description: 'Unexpected server error' },
}

type Build = (ctx: RequestContext, userId: string) => SessionCommand

export function adminRoutes(transport: SessionTransport): Route[] {
  const target = (ctx: RequestContext) => ({ sessionId: uuidParam(ctx, 'sessionId', 'INVALID_SESSION_ID'), accountId: ctx.principal.accountId })

  /** A PUT that runs one command and answers 200 with an empty body. */
  const action = (name: string, summary: string, build: Build, requestSchema?: string): JsonRoute => ({
    method: 'put',
    path: `${ADMIN_BASE}/:sessionId/${name}`,
    role: 'admin',
    tag,
    summary,
    requiredHeaders: ['UserId'],
    ...(requestSchema ? { requestSchema } : {}),
    responses: { '200': { description: 'Done (empty body)' }, ...errors },
    async handle(ctx) {
      const userId = userIdOf(ctx)
      const t = target(ctx)
      await transport.command(t, build(ctx, userId))
      return { status: 200 }
    },
  })

  return [
    action(
      'append',
      'Append messages to the conversation context (existing ones are kept)',
      (ctx, userId) => ({ type: 'admin.append', userId, messages: body<{ context: ContextMessageInput[] }>(ctx, 'admin.append').context }),
      'admin.append',
    ),
    action(
      'override',
      'Replace the whole conversation context ({context:[...]}; [] clears it), optionally the session arguments',
      (ctx, userId) => {
        const b = body<{ context: ContextMessageInput[]; arguments?: Record<string, unknown> }>(ctx, 'admin.override')
        return { type: 'admin.override', userId, messages: b.context, arguments: b.arguments }
      },
      'admin.override',
    ),
    action('attend', 'Make the assistant reply now, out of turn', (_ctx, userId) => ({ type: 'admin.attend', userId })),
    action(
      'whisper',
      'Hidden system message for the assistant; recorded, never sent to the end user',
      (ctx, userId) => ({ type: 'admin.whisper', userId, text: body<{ text: string }>(ctx, 'admin.whisper').text }),
      'admin.whisper',
    ),
    action(
      'impersonate',
      'Send a message as the assistant, without generation',
      (ctx, userId) => {
        const b = body<{ text: string; applyModifiers?: boolean }>(ctx, 'admin.impersonate')
        return { type: 'admin.impersonate', userId, text: b.text, applyModifiers: b.applyModifiers ?? false }
      },
      'admin.impersonate',
    ),
    {
      method: 'put',
      path: `${ADMIN_BASE}/:sessionId/toolinject`,
      role: 'admin',
      tag,
      summary: "Run one of the crew's tools in the session; answers the tool's result (external tools: pending + correlationId)",
      requiredHeaders: ['UserId'],
      requestSchema: 'admin.toolinject',
      responses: { '200': { description: 'The tool result', schema: 'admin.toolResult' }, ...errors },
      async handle(ctx) {
        const userId = userIdOf(ctx)
        const t = target(ctx)
        const b = body<{ tool: string; args?: unknown }>(ctx, 'admin.toolinject')
        const result = await transport.command(t, { type: 'admin.toolinject', userId, tool: b.tool, args: b.args ?? {} })
        return { status: 200, body: result }
      },
    },
    action(
      'transfer',
      "Hand the conversation to another agent of the crew (target); the conversation continues",
      (ctx, userId) => {
        const b = body<{ target: string; reason?: string }>(ctx, 'admin.transfer')
        return { type: 'admin.transfer', userId, target: b.target, reason: b.reason }
      },
      'admin.transfer',
    ),
    action('pause', 'Suspend the assistant: it produces nothing; user messages are kept', (ctx, userId) => ({
      type: 'admin.pause',
      userId,
      reason: body<{ reason?: string }>(ctx, 'admin.pause', true).reason,
    })),
    action('resume', 'Resume a paused session; kept user messages are answered', (_ctx, userId) => ({ type: 'admin.resume', userId })),
    {
      method: 'get',
      path: `${ADMIN_BASE}/:sessionId/history`,
      role: 'admin',
      tag,
      summary: 'The session timeline: messages, tools, transfers, guardrails, administrative actions (?after=seq&limit=n)',
      requiredHeaders: ['UserId'],
      responses: { '200': { description: 'Timeline', schema: 'admin.history' }, ...errors },
      async handle(ctx) {
        userIdOf(ctx)
        const t = target(ctx)
        const after = intQuery(ctx, 'after', 0, 0, Number.MAX_SAFE_INTEGER)
        const limit = intQuery(ctx, 'limit', 1000, 1, 5000)
        return { status: 200, body: await transport.command(t, { type: 'query.history', after, limit }) }
      },
    },
    {
      method: 'get',
      path: `${ADMIN_BASE}/:sessionId/snapshot`,
      role: 'admin',
      tag,
      summary: 'Memory, context (with ResumenConversacion) and active configuration; used by SIP handoff backends (X-Session-ID)',
      requiredHeaders: ['UserId'],
      responses: { '200': { description: 'Snapshot', schema: 'admin.snapshot' }, ...errors },
      async handle(ctx) {
        userIdOf(ctx)
        return { status: 200, body: await transport.command(target(ctx), { type: 'query.snapshot' }) }
      },
    },
    {
      method: 'put',
      path: `${ADMIN_BASE}/:sessionId/external/:correlationUUID`,
      role: 'admin',
      tag,
      summary: 'Deliver the final result of an externally run tool; the waiting tool call completes',
      requiredHeaders: ['UserId'],
      requestSchema: 'admin.external.result',
      responses: { '200': { description: 'Delivered (empty body)' }, ...errors, '404': { description: 'SESSION_NOT_FOUND or CORRELATION_NOT_FOUND' }, '409': { description: 'CORRELATION_ALREADY_RESOLVED' } },
      async handle(ctx) {
        const userId = userIdOf(ctx)
        const t = target(ctx)
        const correlationId = uuidParam(ctx, 'correlationUUID', 'INVALID_CORRELATION_ID')
        const result = body<unknown>(ctx, 'admin.external.result')
        await transport.command(t, { type: 'external.resolve', userId, correlationId, result })
        return { status: 200 }
      },
    },
    {
      method: 'del',
      path: `${ADMIN_BASE}/:sessionId`,
      role: 'admin',
      tag,
      summary: 'Destroy the session: streams get session.closed and end; resources are released',
      requiredHeaders: ['UserId'],
      responses: { '204': { description: 'Destroyed' }, ...errors },
      async handle(ctx) {
        const userId = userIdOf(ctx)
        await transport.command(target(ctx), { type: 'session.destroy', reason: 'admin_destroyed', by: 'admin', userId })
        return { status: 204 }
      },
    },
  ]
}

function intQuery(ctx: RequestContext, name: string, fallback: number, min: number, max: number): number {
  const raw = ctx.query.get(name)
  if (raw === null || raw === '') return fallback
  if (!/^\d+$/.test(raw) || Number(raw) < min || Number(raw) > max) {
    throw new Invalid('VALIDATION_FAILED', `${name} must be an integer between ${min} and ${max}`, { details: [{ field: name, code: 'OUT_OF_RANGE', reason: `${name} must be an integer between ${min} and ${max}` }] })
  }
  return Number(raw)
}
