// The assistant channel over a WebSocket (engine/streams/channel-socket.ts), and the tickets a
// browser opens one with.
import { Invalid } from '../../platform/errors.js'
import { jsonRoute, type Route, type SocketRoute } from '../../platform/http.js'
import { parseLastEventId } from '../../gateway/sse.js'
import { presentedTicket, type SocketTickets } from '../../gateway/socket-tickets.js'
import { isUuid } from '../../platform/ids.js'
import { CHANNEL_SUBPROTOCOL } from '../../schemas/index.js'
import { ChannelSocket, type AttachRequest, type ChannelSocketDeps } from '../streams/channel-socket.js'

export const SOCKET_PATH = '/assistants-channel/api/v1/channel/api/socket'

const tag = 'Assistant channel'

/** `?sessionId=&consumerId=&lastEventId=` (or the Last-Event-ID header): attach as the socket opens. */
function attachOf(query: URLSearchParams, headers: Record<string, string>): AttachRequest | undefined {
  const sessionId = query.get('sessionId') ?? undefined
  const consumerId = query.get('consumerId') ?? undefined
  const lastEventId = parseLastEventId(headers['last-event-id'] ?? query.get('lastEventId'))
  if (sessionId === undefined) {
    if (consumerId !== undefined || lastEventId !== undefined) throw new Invalid('INVALID_PARAMETER', 'consumerId and lastEventId go with sessionId')
    return undefined
  }
  if (!isUuid(sessionId)) throw new Invalid('INVALID_SESSION_ID', 'sessionId must be a UUID')
  if (consumerId !== undefined && !isUuid(consumerId)) throw new Invalid('INVALID_CONSUMER_ID', 'consumerId must be a UUID')
  if (lastEventId === null) throw new Invalid('INVALID_LAST_EVENT_ID', 'lastEventId must be a non-negative integer')
  return { sessionId, consumerId, lastEventId }
}

export function channelSocketRoutes(deps: ChannelSocketDeps, tickets: SocketTickets): Route[] {
  const socket: SocketRoute = {
    kind: 'socket',
    method: 'get',
    path: SOCKET_PATH,
    role: 'channel',
    tag,
    summary: 'The channel over a WebSocket: open a session (frame `open`) or attach to one (frame `attach`, or ?sessionId=), then its events and your frames (docs/api.md)',
    responses: {
      '101': { description: 'Switching protocols: frames per docs/api.md, the server\'s in schema socket.out', schema: 'socket.out' },
      '400': { description: 'INVALID_SESSION_ID, INVALID_CONSUMER_ID, INVALID_LAST_EVENT_ID, INVALID_PARAMETER' },
      '401': { description: 'No apikey header and no valid unused ticket' },
      '403': { description: 'FORBIDDEN (role), ORIGIN_NOT_ALLOWED' },
      '426': { description: 'UPGRADE_REQUIRED: not a WebSocket handshake' },
    },
    async authenticate({ query, protocols }) {
      const ticket = presentedTicket(query, protocols)
      return ticket ? tickets.redeem(ticket) : null
    },
    protocol: offered => (offered.includes(CHANNEL_SUBPROTOCOL) ? CHANNEL_SUBPROTOCOL : offered[0]),
    accept: ctx => new ChannelSocket(deps, ctx.principal, ctx.scope, attachOf(ctx.query, ctx.headers)),
  }
  return [
    socket,
    jsonRoute({
      method: 'post',
      path: `${SOCKET_PATH}/tickets`,
      role: 'channel',
      tag,
      summary: 'A single-use ticket (valid CHANNEL_SOCKET_TICKET_TTL_MS) for a browser to open the channel socket with, for one crew or one session',
      requestSchema: 'channel.socketTicket',
      responses: { '201': { description: 'The ticket', schema: 'channel.socketTicketIssued' }, '400': { description: 'VALIDATION_FAILED' } },
      async handle(ctx) {
        const { crewId, sessionId } = ctx.input
        const issued = tickets.issue(ctx.principal, sessionId ? { sessionId: sessionId.toLowerCase() } : { crewId })
        return { status: 201, body: { ...issued, path: SOCKET_PATH } }
      },
    }),
  ]
}
