// Idempotency-Key for dialer writes (spec section 5, IETF draft-ietf-httpapi-idempotency-key):
// the first request with a key records "in flight", then its response; a retry with the same
// key and body replays that response; a different body is 422; a concurrent retry is 409 with
// Retry-After. 5xx responses are not stored. When the idempotency store is unreachable the
// request still runs, marked `Idempotency-Status: bypassed`.
// Records are bounded: a 4xx body larger than `maxStoredResponseBytes` is not kept (the key is
// released, and a retry is validated again: a 4xx changed nothing, so that is safe), and an
// account may open `maxKeysPerAccount` new keys per 24 h (counted per UTC hour), then 429.
import { createHash } from 'node:crypto'
import { ApiError, httpError, type JsonResult, type JsonRoute, type RequestContext } from '../platform/http.js'
import { type Collection, DuplicateKeyError, type Store, StoreUnavailableError } from '../platform/store/index.js'
import type { Clock } from '../platform/clock.js'
import type { Logger } from '../platform/logger.js'
import { COLLECTIONS, IDEMPOTENCY_INDEXES, IDEMPOTENCY_USAGE_INDEXES } from './collections.js'

const RETENTION_MS = 24 * 60 * 60 * 1000
/** How long an in-flight record blocks retries before a crashed holder is presumed dead. */
const LOCK_MS = 60 * 1000
const KEY_PATTERN = /^[\x20-\x7E]{1,255}$/
/** Response headers worth replaying. */
const REPLAYED_HEADERS = ['Location']

interface StoredResponse {
  status: number
  body: unknown
  headers: Record<string, string>
}

interface IdempotencyDoc {
  _id: string
  accountId: string
  state: 'in_flight' | 'completed'
  fingerprint: string
  response: StoredResponse | null
  lockedUntil: Date
  expiresAt: Date
}

/** New keys an account opened in one UTC hour (kept 25 h: the cap looks back 24 h). */
interface UsageDoc {
  _id: string
  accountId: string
  hour: number
  keys: number
  expiresAt: Date
}

export interface IdempotencyLimits {
  maxStoredResponseBytes: number
  maxKeysPerAccount: number
}

const HOUR_MS = 60 * 60 * 1000

type Begin = { kind: 'new' } | { kind: 'quota'; retryAfter: number } | { kind: 'replay'; response: StoredResponse } | { kind: 'in_flight'; retryAfter: number } | { kind: 'mismatch' }

const sha256 = (text: string | Buffer) => createHash('sha256').update(text).digest('hex')

export class Idempotency {
  private readonly docs: Collection<IdempotencyDoc>
  private readonly usage: Collection<UsageDoc>

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly logger: Logger,
    private readonly limits: IdempotencyLimits,
  ) {
    this.docs = store.collection<IdempotencyDoc>(COLLECTIONS.idempotency)
    this.usage = store.collection<UsageDoc>(COLLECTIONS.idempotencyUsage)
  }

  async ensureIndexes() {
    try {
      await this.store.ensureIndexes(COLLECTIONS.idempotency, IDEMPOTENCY_INDEXES)
      await this.store.ensureIndexes(COLLECTIONS.idempotencyUsage, IDEMPOTENCY_USAGE_INDEXES)
    } catch (error) {
      this.logger.warn('idempotency store unavailable at start-up; keys are bypassed until it returns', { error })
    }
  }

  /** A write route that honours Idempotency-Key: what it answers (a 400 for its body included) is kept and replayed. */
  wrap(route: JsonRoute): JsonRoute {
    return { ...route, around: (ctx, next) => this.around(route, ctx, next) }
  }

  private async around(route: JsonRoute, ctx: RequestContext, next: () => Promise<JsonResult>): Promise<JsonResult> {
    const key = ctx.headers['idempotency-key']
    if (key === undefined) return next()
    if (!KEY_PATTERN.test(key)) {
      throw new ApiError(400, 'INVALID_IDEMPOTENCY_KEY', 'Idempotency-Key must be 1 to 255 printable ASCII characters')
    }
    // Scoped per account and per route (method and concrete path).
    const id = sha256(`${ctx.principal.accountId}\n${ctx.method}\n${ctx.url}\n${key}`)
    const fingerprint = sha256(ctx.body)

    let begun: Begin
    try {
      begun = await this.begin(ctx.principal.accountId, id, fingerprint)
    } catch (error) {
      if (!(error instanceof StoreUnavailableError)) throw error
      this.logger.warn('idempotency store unavailable; request processed unprotected', { route: route.path })
      const result = await settle(next)
      return withHeaders(result, { 'Idempotency-Status': 'bypassed' })
    }

    if (begun.kind === 'quota') {
      throw new ApiError(429, 'IDEMPOTENCY_QUOTA_EXCEEDED', `This account opened ${this.limits.maxKeysPerAccount} Idempotency-Keys in the last 24 hours; send the request without one or retry later`, {}, {
        'Retry-After': String(begun.retryAfter),
      })
    }
    if (begun.kind === 'mismatch') {
      throw new ApiError(422, 'IDEMPOTENCY_KEY_REUSED', 'This Idempotency-Key was already used with a different request body')
    }
    if (begun.kind === 'in_flight') {
      throw new ApiError(409, 'IDEMPOTENCY_KEY_IN_FLIGHT', 'A request with this Idempotency-Key is still being processed', {}, {
        'Retry-After': String(begun.retryAfter),
      })
    }
    if (begun.kind === 'replay') {
      const { status, body, headers } = begun.response
      return { status, body, headers: { ...headers, 'Idempotency-Replayed': 'true' } }
    }

    let result: JsonResult
    try {
      result = await settle(next)
    } catch (error) {
      await this.release(id)
      throw error
    }
    if (result.status >= 500) {
      await this.release(id)
      return withHeaders(result, { 'Idempotency-Replayed': 'false' })
    }
    if (result.status >= 400 && serializedSize(result.body) > this.limits.maxStoredResponseBytes) {
      await this.release(id)
      return withHeaders(result, { 'Idempotency-Replayed': 'false', 'Idempotency-Status': 'not-stored' })
    }
    await this.complete(id, result)
    return withHeaders(result, { 'Idempotency-Replayed': 'false' })
  }

  /** Counts a new key against the account's 24 h allowance; the retry-after seconds when it is spent. */
  private async spendKey(accountId: string, now: number): Promise<number | null> {
    const hour = Math.floor(now / HOUR_MS)
    const recent = await this.usage.find({ accountId, hour: { $gt: hour - 24 } })
    const used = recent.reduce((sum, doc) => sum + doc.keys, 0)
    if (used >= this.limits.maxKeysPerAccount) {
      const oldest = Math.min(...recent.map(doc => doc.hour))
      return Math.max(1, Math.ceil(((oldest + 24) * HOUR_MS - now) / 1000))
    }
    await this.usage.updateOne(
      { _id: `${accountId}|${hour}` },
      { $inc: { keys: 1 }, $setOnInsert: { accountId, hour, expiresAt: new Date((hour + 25) * HOUR_MS) } },
      { upsert: true },
    )
    return null
  }

  private async begin(accountId: string, id: string, fingerprint: string, retried = false): Promise<Begin> {
    const now = this.clock.now()
    if (!retried && !(await this.docs.findOne({ _id: id }))) {
      const retryAfter = await this.spendKey(accountId, now)
      if (retryAfter !== null) return { kind: 'quota', retryAfter }
    }
    try {
      await this.docs.insertOne({
        _id: id,
        accountId,
        state: 'in_flight',
        fingerprint,
        response: null,
        lockedUntil: new Date(now + LOCK_MS),
        expiresAt: new Date(now + RETENTION_MS),
      })
      return { kind: 'new' }
    } catch (error) {
      if (!(error instanceof DuplicateKeyError)) throw error
    }
    const existing = await this.docs.findOne({ _id: id })
    if (!existing || existing.expiresAt.getTime() <= now) {
      // Expired but not yet swept by the TTL monitor: it no longer exists for the client.
      if (existing) await this.docs.deleteOne({ _id: id, expiresAt: { $lte: new Date(now) } })
      if (retried) throw new Error('idempotency record vanished twice')
      return this.begin(accountId, id, fingerprint, true)
    }
    if (existing.fingerprint !== fingerprint) return { kind: 'mismatch' }
    if (existing.state === 'completed' && existing.response) return { kind: 'replay', response: existing.response }
    if (existing.lockedUntil.getTime() > now) {
      return { kind: 'in_flight', retryAfter: Math.max(1, Math.min(5, Math.ceil((existing.lockedUntil.getTime() - now) / 1000))) }
    }
    // The holder died mid-request: take the lock over (only one retry can win it).
    const taken = await this.docs.updateOne(
      { _id: id, state: 'in_flight', lockedUntil: existing.lockedUntil },
      { $set: { lockedUntil: new Date(now + LOCK_MS) } },
    )
    return taken.modifiedCount === 1 ? { kind: 'new' } : { kind: 'in_flight', retryAfter: 1 }
  }

  private async complete(id: string, result: JsonResult) {
    const headers: Record<string, string> = {}
    for (const name of REPLAYED_HEADERS) if (result.headers?.[name]) headers[name] = result.headers[name]!
    try {
      await this.docs.updateOne({ _id: id }, { $set: { state: 'completed', response: { status: result.status, body: result.body ?? null, headers } } })
    } catch (error) {
      this.logger.warn('could not record idempotent response', { error })
    }
  }

  private async release(id: string) {
    try {
      await this.docs.deleteOne({ _id: id, state: 'in_flight' })
    } catch (error) {
      this.logger.warn('could not release idempotency key', { error })
    }
  }
}

/** Validates and runs the handler; a 4xx answer (an ApiError or a domain error) becomes a result so it is stored and replayed too. */
async function settle(next: () => Promise<JsonResult>): Promise<JsonResult> {
  try {
    return await next()
  } catch (error) {
    const answer = httpError(error)
    if (answer && answer.status < 500) return { status: answer.status, body: answer.body(), headers: answer.headers }
    throw error
  }
}

/** JSON size of a response body, for the record bound (bodies here are small unless an error lists much). */
const serializedSize = (body: unknown): number => (body === undefined ? 0 : Buffer.byteLength(JSON.stringify(body) ?? ''))

const withHeaders = (result: JsonResult, headers: Record<string, string>): JsonResult => ({
  ...result,
  headers: { ...result.headers, ...headers },
})
