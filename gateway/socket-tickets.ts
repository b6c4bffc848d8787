// Tickets: how a client that cannot set headers (a browser's WebSocket) authenticates a socket
// without the API key ever being in a URL. A backend holding the key asks for a ticket (POST
// .../socket/tickets); the browser presents it once, within CHANNEL_SOCKET_TICKET_TTL_MS, in
// the URL (`?ticket=`) or as a subprotocol (`ticket.<ticket>`).
//
// A ticket is signed, not stored: it carries its account, the key that asked for it, what it is
// for (a crew to open a session on, or a session to attach to), its expiry and a random nonce,
// with an HMAC over them (labelled, so it can pass for no other signature made with the same
// secret). Single use is the store's: the first redemption inserts the nonce (expiring with the
// ticket), a second finds it there. The store and the secret are shared by every gateway, so a
// ticket is good once, through any of them.
import { randomBytes } from 'node:crypto'
import type { Clock } from '../platform/clock.js'
import type { Principal, SocketScope } from '../platform/http.js'
import { DuplicateKeyError, type Store } from '../platform/store/index.js'
import { ClaimSeal } from './signed-claims.js'

const LABEL = 'switchboard.socket-ticket.v1.'
/** The subprotocol prefix a browser offers a ticket under. */
export const TICKET_PROTOCOL_PREFIX = 'ticket.'

interface TicketClaims {
  /** account, issuing key */
  a: string
  k: string
  /** crew or session it is for */
  c?: string
  s?: string
  /** expiry (Unix ms), nonce */
  e: number
  n: string
}

export class SocketTickets {
  static readonly collection = 'channel_socket_tickets'

  private readonly seal: ClaimSeal<TicketClaims>

  constructor(
    private readonly store: Store,
    secret: string,
    private readonly clock: Clock,
    private readonly ttlMs: number,
  ) {
    this.seal = new ClaimSeal(secret, LABEL)
  }

  async init() {
    await this.store.ensureIndexes(SocketTickets.collection, [{ name: 'expires_ttl', key: { expiresAt: 1 }, expireAfterSeconds: 0 }])
  }

  issue(principal: Principal, scope: SocketScope): { ticket: string; expiresAt: string } {
    const expires = this.clock.now() + this.ttlMs
    const claims: TicketClaims = { a: principal.accountId, k: principal.keyId, ...(scope.crewId ? { c: scope.crewId } : {}), ...(scope.sessionId ? { s: scope.sessionId } : {}), e: expires, n: randomBytes(16).toString('base64url') }
    return { ticket: this.seal.seal(claims), expiresAt: new Date(expires).toISOString() }
  }

  /** The grant of a valid ticket, used now; null when it is malformed, forged, expired or used. */
  async redeem(ticket: string): Promise<{ principal: Principal; scope: SocketScope } | null> {
    const claims = this.verify(ticket)
    if (!claims) return null
    try {
      await this.store.collection<{ _id: string; expiresAt: Date }>(SocketTickets.collection).insertOne({ _id: claims.n, expiresAt: new Date(claims.e) })
    } catch (error) {
      if (error instanceof DuplicateKeyError) return null
      throw error
    }
    return {
      principal: { keyId: claims.k, keyName: 'socket ticket', accountId: claims.a, roles: new Set(['channel']) },
      scope: { ...(claims.c ? { crewId: claims.c } : {}), ...(claims.s ? { sessionId: claims.s } : {}) },
    }
  }

  private verify(ticket: string): TicketClaims | null {
    const claims = this.seal.open(ticket, this.clock.now())
    return claims && typeof claims.n === 'string' && typeof claims.a === 'string' ? claims : null
  }
}

/** The ticket an upgrade presents: `?ticket=`, else an offered `ticket.<ticket>` subprotocol. */
export function presentedTicket(query: URLSearchParams, protocols: string[]): string | undefined {
  const inQuery = query.get('ticket')
  if (inQuery) return inQuery
  return protocols.find(p => p.startsWith(TICKET_PROTOCOL_PREFIX))?.slice(TICKET_PROTOCOL_PREFIX.length) || undefined
}
