// Claims sealed with an HMAC: a credential the service can check without storing it (socket
// tickets, ConversationRelay tokens). The token is `<claims as base64url JSON>.<HMAC-SHA256>`;
// the HMAC covers a label before the claims, so a token of one kind (or an upload URL signed
// with the same secret) can never pass for another. Every sealed kind carries its expiry `e`
// (Unix ms), checked on opening.
import { createHmac, timingSafeEqual } from 'node:crypto'

export interface ExpiringClaims {
  /** Expiry, Unix ms. */
  e: number
}

export class ClaimSeal<C extends ExpiringClaims> {
  constructor(
    private readonly secret: string,
    /** What the token is for, e.g. `switchboard.socket-ticket.v1.` (distinct per kind). */
    private readonly label: string,
  ) {}

  private sign(payload: string) {
    return createHmac('sha256', this.secret).update(this.label).update(payload).digest('base64url')
  }

  seal(claims: C): string {
    const payload = Buffer.from(JSON.stringify(claims)).toString('base64url')
    return `${payload}.${this.sign(payload)}`
  }

  /** The claims of a token this seal made and that has not expired at `now`; null otherwise. */
  open(token: string, now: number, maxLength = 1024): C | null {
    if (token.length > maxLength) return null
    const dot = token.indexOf('.')
    if (dot <= 0) return null
    const payload = token.slice(0, dot)
    const given = Buffer.from(token.slice(dot + 1), 'base64url')
    const expected = Buffer.from(this.sign(payload), 'base64url')
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return null
    let claims: C
    try {
      claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'))
    } catch {
      return null
    }
    if (!claims || typeof claims !== 'object' || typeof claims.e !== 'number' || claims.e <= now) return null
    return claims
  }
}
