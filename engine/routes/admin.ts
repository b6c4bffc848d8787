// Session administration (spec 4.3): live supervisor operations on one session. Every route
// needs the admin role and a UserId header, which the history records.
import { Invalid } from '../../platform/errors.js'
import { jsonRoute, type JsonRoute, type RequestContext, type Route } from '../../platform/http.js'
import type { BodyOf, RequestSchemaId } from '../../schemas/index.js'
import type { SessionCommand, SessionTransport } from '../transport.js'
import { userIdOf, uuidParam } from './common.js'

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

export function adminRoutes(transport: SessionTransport): Route[] {
  const target = (ctx: RequestContext) => ({ sessionId: uuidParam(ctx, 'sessionId', 'INVALID_SESSION_ID'), accountId: ctx.principal.accountId })
  // Who acts and on which session are checked before the body: a request without UserId is told so first.
  const preValidation = (ctx: RequestContext) => {
    userIdOf(ctx)
    target(ctx)
  }
  const base = (name: string, summary: string) => ({
    method: 'put' as const,
    path: `${ADMIN_BASE}/:sessionId/${name}`,
    role: 'admin' as const,
    tag,
    summary,
    requiredHeaders: ['UserId'],
    preValidation,
  })
  const done = { '200': { description: 'Done (empty body)' }, ...errors }

  /** A PUT without a body that runs one command and answers 200 with an empty body. */
  const action = (name: string, summary: string, command: (userId: string) => SessionCommand): JsonRoute => ({
    ...base(name, summary),
    responses: done,
    async handle(ctx) {
      await transport.command(target(ctx), command(userIdOf(ctx)))
      return { status: 200 }
    },
  })

  /** The same with a body of `requestSchema`'s type (the gateway validated it: ctx.input is that type). */
  const actionWithBody = <Id extends RequestSchemaId>(
    name: string,
    summary: string,
    requestSchema: Id,
    command: (input: BodyOf<Id>, userId: string) => SessionCommand,
    bodyOptional = false,
  ): JsonRoute => {
    const commandOf = command as unknown as (input: unknown, userId: string) => SessionCommand
    return {
      ...base(name, summary),
      requestSchema,
      bodyOptional,
      responses: done,
      async handle(ctx) {
        await transport.command(target(ctx), commandOf(ctx.input, userIdOf(ctx)))
        return { status: 200 }
      },
    }
  }

  return [
    actionWithBody('append', 'Append messages to the conversation context (existing ones are kept)', 'admin.append', (input, userId) => ({
      type: 'admin.append',
      userId,
      messages: [...input.context],
    })),
    actionWithBody(
      'override',
      'Replace the whole conversation context ({context:[...]}; [] clears it), optionally the session arguments',
      'admin.override',
      (input, userId) => ({ type: 'admin.override', userId, messages: [...input.context], arguments: input.arguments }),
    ),
    action('attend', 'Make the assistant reply now, out of turn', userId => ({ type: 'admin.attend', userId })),
    actionWithBody('whisper', 'Hidden system message for the assistant; recorded, never sent to the end user', 'admin.whisper', (input, userId) => ({
      type: 'admin.whisper',
      userId,
      text: input.text,
    })),
    actionWithBody('impersonate', 'Send a message as the assistant, without generation', 'admin.impersonate', (input, userId) => ({
      type: 'admin.impersonate',
      userId,
      text: input.text,
      applyModifiers: input.applyModifiers ?? false,
    })),
    jsonRoute({
      ...base('toolinject', "Run one of the crew's tools in the session; answers the tool's result (external tools: pending + correlationId)"),
      requestSchema: 'admin.toolinject',
      responses: { '200': { description: 'The tool result', schema: 'admin.toolResult' }, ...errors },
      async handle(ctx) {
        const result = await transport.command(target(ctx), { type: 'admin.toolinject', userId: userIdOf(ctx), tool: ctx.input.tool, args: ctx.input.args ?? {} })
        return { status: 200, body: result }
      },
    }),
    actionWithBody('transfer', 'Hand the conversation to another agent of the crew (target); the conversation continues', 'admin.transfer', (input, userId) => ({
      type: 'admin.transfer',
      userId,
      target: input.target,
      reason: input.reason,
    })),
    actionWithBody(
      'pause',
      'Suspend the assistant: it produces nothing; user messages are kept',
      'admin.pause',
      (input, userId) => ({ type: 'admin.pause', userId, reason: input.reason }),
      true,
    ),
    action('resume', 'Resume a paused session; kept user messages are answered', userId => ({ type: 'admin.resume', userId })),
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
      preValidation(ctx) {
        preValidation(ctx)
        uuidParam(ctx, 'correlationUUID', 'INVALID_CORRELATION_ID')
      },
      requestSchema: 'admin.external.result',
      responses: { '200': { description: 'Delivered (empty body)' }, ...errors, '404': { description: 'SESSION_NOT_FOUND or CORRELATION_NOT_FOUND' }, '409': { description: 'CORRELATION_ALREADY_RESOLVED' } },
      async handle(ctx) {
        const userId = userIdOf(ctx)
        const t = target(ctx)
        const correlationId = uuidParam(ctx, 'correlationUUID', 'INVALID_CORRELATION_ID')
        await transport.command(t, { type: 'external.resolve', userId, correlationId, result: ctx.input })
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
