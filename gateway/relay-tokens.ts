// ConversationRelay credentials. The telephony platform opens the socket to us, so it cannot
// send our API key: the URL configured on the platform carries a token, issued by a POST with
// the key, naming the account and the crew its calls open sessions on. Unlike a socket ticket a
// token is reusable until it expires (one platform URL serves many calls) and nothing is stored:
// it is sealed claims (gateway/signed-claims.ts) under a label of its own. It cannot be revoked
// before its expiry; keep CONVERSATION_RELAY_TOKEN_TTL_MS as short as reissuing allows.
//
// When the account has a relay secret (its Twilio auth token), the handshake must also carry the
// platform's own signature, Twilio's webhook signing: `X-Twilio-Signature` = base64(HMAC-SHA1(
// secret, the full URL the platform connected to)).
import { createHmac, timingSafeEqual } from 'node:crypto'
import type { Clock } from '../platform/clock.js'
import type { Principal, SocketScope } from '../platform/http.js'
import { ClaimSeal } from './signed-claims.js'

const LABEL = 'switchboard.conversation-relay.v1.'

interface RelayClaims {
  /** account, issuing key, crew */
  a: string
  k: string
  c: string
  /** expiry (Unix ms) */
  e: number
}

export class RelayTokens {
  private readonly seal: ClaimSeal<RelayClaims>

  constructor(
    secret: string,
    private readonly clock: Clock,
    /** The longest (and default) life of a token. */
    private readonly maxTtlMs: number,
  ) {
    this.seal = new ClaimSeal(secret, LABEL)
  }

  issue(principal: Principal, crewId: string, ttlMs = this.maxTtlMs): { token: string; expiresAt: string } {
    const expires = this.clock.now() + Math.min(ttlMs, this.maxTtlMs)
    return { token: this.seal.seal({ a: principal.accountId, k: principal.keyId, c: crewId, e: expires }), expiresAt: new Date(expires).toISOString() }
  }

  /** The grant of a valid token; null when it is malformed, forged or expired. */
  redeem(token: string): { principal: Principal; scope: SocketScope } | null {
    const claims = this.seal.open(token, this.clock.now())
    if (!claims || typeof claims.a !== 'string' || typeof claims.k !== 'string' || typeof claims.c !== 'string') return null
    return { principal: { keyId: claims.k, keyName: 'conversation relay token', accountId: claims.a, roles: new Set(['channel']) }, scope: { crewId: claims.c } }
  }
}

/** Twilio's webhook signature of a request without a form body: base64(HMAC-SHA1(authToken, url)). */
export function twilioSignature(authToken: string, url: string): string {
  return createHmac('sha1', authToken).update(url, 'utf8').digest('base64')
}

/** Whether `signature` signs one of `urls` (the URL as the platform may have spelled it). */
export function twilioSignatureValid(authToken: string, urls: readonly string[], signature: string | undefined): boolean {
  if (!signature) return false
  const given = Buffer.from(signature, 'utf8')
  return urls.some(url => {
    const expected = Buffer.from(twilioSignature(authToken, url), 'utf8')
    return expected.length === given.length && timingSafeEqual(expected, given)
  })
}
