// The ConversationRelay endpoint (engine/streams/conversation-relay.ts) and the tokens a
// telephony platform's URL carries to open it.
import { ApiError, jsonRoute, type Route, type SocketContext, type SocketRoute } from '../../platform/http.js'
import { twilioSignatureValid, type RelayTokens } from '../../gateway/relay-tokens.js'
import { ConversationRelay, type ConversationRelayDeps } from '../streams/conversation-relay.js'

export const RELAY_PATH = '/assistants-channel/api/v1/channel/api/conversation-relay'

const tag = 'Assistant channel'

export interface RelayRouteOptions {
  tokens: RelayTokens
  /** The platform's signing secret for an account (CONVERSATION_RELAY_AUTH_TOKEN); undefined: not checked. */
  authTokenOf: (accountId: string) => string | undefined
  /** PUBLIC_BASE_URL: the host the platform connects to, when a proxy stands in front of us. */
  publicBaseUrl?: string
}

/**
 * The URLs the platform may have signed: the one it connected to, `wss://` (Twilio connects
 * over TLS only) or `ws://`, on PUBLIC_BASE_URL's host when set, else on the Host header's.
 */
export function signedUrls(ctx: Pick<SocketContext, 'url' | 'rawQuery' | 'headers'>, publicBaseUrl?: string): string[] {
  const host = publicBaseUrl ? new URL(publicBaseUrl).host : ctx.headers['host']
  if (!host) return []
  const pathAndQuery = `${ctx.url}${ctx.rawQuery ? `?${ctx.rawQuery}` : ''}`
  return [`wss://${host}${pathAndQuery}`, `ws://${host}${pathAndQuery}`]
}

export function conversationRelayRoutes(deps: ConversationRelayDeps, options: RelayRouteOptions): Route[] {
  const { tokens } = options
  const socket: SocketRoute = {
    kind: 'socket',
    method: 'get',
    path: RELAY_PATH,
    role: 'channel',
    tag,
    summary: "Twilio/Telnyx ConversationRelay: the platform connects with ?token= (POST .../conversation-relay/tokens); one call, one session on the token's crew (docs/api.md)",
    responses: {
      '101': { description: "Switching protocols: the platform's frames per docs/api.md, ours in schema relay.out", schema: 'relay.out' },
      '401': { description: 'No valid unexpired relay token' },
      '403': { description: 'INVALID_SIGNATURE: the account has a relay secret and X-Twilio-Signature does not sign the URL' },
      '426': { description: 'UPGRADE_REQUIRED: not a WebSocket handshake' },
    },
    async authenticate({ query }) {
      const token = query.get('token')
      return token ? tokens.redeem(token) : null
    },
    accept(ctx) {
      const crewId = ctx.scope?.crewId
      if (!crewId) throw new ApiError(401, 'UNAUTHORIZED', 'ConversationRelay needs a relay token (?token=), not an API key: it names the crew')
      const secret = options.authTokenOf(ctx.principal.accountId)
      if (secret !== undefined && !twilioSignatureValid(secret, signedUrls(ctx, options.publicBaseUrl), ctx.headers['x-twilio-signature'])) {
        throw new ApiError(403, 'INVALID_SIGNATURE', 'X-Twilio-Signature is missing or does not sign this URL with the account\'s relay secret (CONVERSATION_RELAY_AUTH_TOKEN)')
      }
      return new ConversationRelay(deps, ctx.principal, crewId)
    },
  }
  return [
    socket,
    jsonRoute({
      method: 'post',
      path: `${RELAY_PATH}/tokens`,
      role: 'channel',
      tag,
      summary: 'A relay token for the platform\'s URL: reusable until it expires (at most CONVERSATION_RELAY_TOKEN_TTL_MS), for one crew of the key\'s account',
      requestSchema: 'channel.relayToken',
      responses: { '201': { description: 'The token', schema: 'channel.relayTokenIssued' }, '400': { description: 'VALIDATION_FAILED' } },
      async handle(ctx) {
        const { crewId, ttlSeconds } = ctx.input
        const issued = tokens.issue(ctx.principal, crewId, ttlSeconds === undefined ? undefined : ttlSeconds * 1000)
        const url = options.publicBaseUrl ? `${options.publicBaseUrl.replace(/^http/, 'ws')}${RELAY_PATH}?token=${issued.token}` : undefined
        return { status: 201, body: { ...issued, path: RELAY_PATH, ...(url ? { url } : {}) } }
      },
    }),
  ]
}
