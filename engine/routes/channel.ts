// The assistant channel (spec 4.2): create a session and stream it, send user messages,
// attach more consumers (or resume one with Last-Event-ID), end the session.
import { Invalid } from '../../platform/errors.js'
import { jsonRoute, streamRoute, type Route } from '../../platform/http.js'
import { parseLastEventId } from '../../gateway/sse.js'
import { isUuid } from '../../platform/ids.js'
import type { ChannelHub } from '../streams/hub.js'
import { endSession, sendUserMessage } from '../streams/channel-commands.js'
import type { SessionTransport } from '../transport.js'
import { uuidParam } from './common.js'

export const CHANNEL_BASE = '/assistants-channel/api/v1/channel/api/eventstream'
export const listenPath = (sessionId: string, consumerId: string) => `${CHANNEL_BASE}/${sessionId}/listen?consumerId=${consumerId}`

const tag = 'Assistant channel'
const errors = {
  '400': { description: 'Invalid body or parameters (VALIDATION_FAILED, CREW_NOT_FOUND, INVALID_SESSION_ID, ...)' },
  '401': { description: 'Missing or unknown apikey' },
  '403': { description: 'The key lacks the channel role' },
  '404': { description: 'Session not found (or owned by another account)' },
}

export function channelRoutes(hub: ChannelHub, transport: SessionTransport): Route[] {
  return [
    streamRoute({
      kind: 'stream',
      method: 'post',
      path: `${CHANNEL_BASE}/:crewId`,
      role: 'channel',
      tag,
      summary: 'Create a session with a crew and stream its events (first event: Initialized)',
      requestSchema: 'channel.create',
      bodyOptional: true,
      responses: {
        '200': { description: 'text/event-stream: Initialized, then the session events', schema: 'channel.stream' },
        '400': errors['400'],
        '429': { description: 'SESSION_LIMIT_REACHED: the crew has maxConcurrentSessions live sessions; ACCOUNT_STREAM_LIMIT: this node is short of streams and the account holds its share or more (Retry-After)' },
        '503': { description: 'OVERLOADED (Retry-After)' },
      },
      async open(ctx, start) {
        const { arguments: args = {}, outbound } = ctx.input
        await hub.create({ accountId: ctx.principal.accountId, crewId: ctx.params.crewId!, arguments: args, outbound }, hub.sse(start))
      },
    }),
    jsonRoute({
      method: 'put',
      path: `${CHANNEL_BASE}/:sessionId/:consumerId`,
      role: 'channel',
      tag,
      summary: 'Send a user message; the reply arrives on the stream',
      requestSchema: 'channel.message',
      preValidation(ctx) {
        uuidParam(ctx, 'sessionId', 'INVALID_SESSION_ID')
        uuidParam(ctx, 'consumerId', 'INVALID_CONSUMER_ID')
      },
      responses: {
        '201': { description: 'Accepted', schema: 'channel.accepted' },
        ...errors,
        '409': { description: 'INVALID_SESSION_STATE' },
      },
      async handle(ctx) {
        const sessionId = uuidParam(ctx, 'sessionId', 'INVALID_SESSION_ID')
        const consumerId = uuidParam(ctx, 'consumerId', 'INVALID_CONSUMER_ID')
        return { status: 201, body: await sendUserMessage(hub, transport, { sessionId, accountId: ctx.principal.accountId }, consumerId, ctx.input.message) }
      },
    }),
    {
      kind: 'stream',
      method: 'post',
      path: `${CHANNEL_BASE}/:sessionId/listen`,
      role: 'channel',
      tag,
      summary: 'Attach a consumer (first event: session.consumer.attached); with Last-Event-ID, the events after it are replayed first (through any gateway)',
      responses: { '200': { description: 'text/event-stream: session.consumer.attached, the replay after Last-Event-ID, then live events', schema: 'channel.stream' }, ...errors, '429': { description: 'CONSUMER_LIMIT_REACHED; ACCOUNT_STREAM_LIMIT: this node is short of streams and the account holds its share or more (Retry-After)' }, '503': { description: 'OVERLOADED (Retry-After)' } },
      async open(ctx, start) {
        const sessionId = uuidParam(ctx, 'sessionId', 'INVALID_SESSION_ID')
        const consumerId = ctx.query.get('consumerId') ?? ctx.headers['x-consumer-id'] ?? undefined
        if (consumerId !== undefined && !isUuid(consumerId)) throw new Invalid('INVALID_CONSUMER_ID', 'consumerId must be a UUID')
        const lastEventId = parseLastEventId(ctx.headers['last-event-id'] ?? ctx.query.get('lastEventId'))
        if (lastEventId === null) throw new Invalid('INVALID_LAST_EVENT_ID', 'Last-Event-ID must be a non-negative integer')
        await hub.listen(
          { sessionId, accountId: ctx.principal.accountId },
          { consumerId: consumerId?.toLowerCase(), lastEventId },
          hub.sse(start),
        )
      },
    },
    jsonRoute({
      method: 'del',
      path: `${CHANNEL_BASE}/:sessionId`,
      role: 'channel',
      tag,
      summary: 'End the session: every stream gets session.closed and ends',
      requestSchema: 'channel.destroy',
      bodyOptional: true,
      preValidation: ctx => void uuidParam(ctx, 'sessionId', 'INVALID_SESSION_ID'),
      responses: { '201': { description: 'Destroyed', schema: 'channel.destroyed' }, ...errors },
      async handle(ctx) {
        const sessionId = uuidParam(ctx, 'sessionId', 'INVALID_SESSION_ID')
        const { reason = 'finished' } = ctx.input
        return { status: 201, body: await endSession(transport, { sessionId, accountId: ctx.principal.accountId }, reason) }
      },
    }),
  ]
}
