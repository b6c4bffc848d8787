// The webhook provider: each attempt is POSTed to DIALER_WEBHOOK_URL as JSON, signed with
// HMAC-SHA256 (X-Switchboard-Signature: sha256=<hex> over
// "switchboard.attempt.v1.<timestamp>.<attempt id>.<raw body>", the timestamp in
// X-Switchboard-Timestamp, Unix seconds), retried with exponential backoff on network errors,
// timeouts, 429 and 5xx (DIALER_WEBHOOK_MAX_TRIES in all); any other answer, or running out of
// tries, ends the attempt as `failed`. A 2xx means "accepted": the outcome comes back later on
// POST /dialer/v1/attempts/{attemptId}/outcome, signed with the same secret over
// "switchboard.callback.v1.<timestamp>.<attempt id>.<raw body>".
// The report is stored first (`dialer_webhook_reports`, keyed by attempt id: a second report is
// refused atomically, whichever process receives it) and then handed to the waiting attempt
// in-process; an attempt waiting in another process finds it by polling the store.
import { setTimeout as delay } from 'node:timers/promises'
import { createHmac, timingSafeEqual } from 'node:crypto'
import { Unauthenticated, NotFound, InvalidState } from '../../platform/errors.js'
import { DuplicateKeyError, type Collection } from '../../platform/store/index.js'
import type { Outcome } from '../rules.js'
import { AttemptHandedOver, type AttemptRequest, type AttemptResult, type Provider, type ResumedAttempt } from './types.js'

export const WEBHOOK_REPORTS = 'dialer_webhook_reports'
/** A callback whose timestamp is further than this from now is refused (replays). */
export const SIGNATURE_TOLERANCE_MS = 5 * 60_000

export interface WebhookReportDoc {
  _id: string
  outcome: Outcome
  detail: string | null
  receivedAt: Date
}

export interface WebhookOptions {
  url?: string
  secret: string
  /** Root the callback URLs are built on (…/dialer/v1/attempts/{id}/outcome). */
  callbackBaseUrl: string
  /** Per-request timeout. */
  timeoutMs: number
  /** Deliveries in all (the first one included). */
  maxTries: number
  /** Wait before the 2nd try; doubled before each further one. */
  backoffMs: number
  /** How long an accepted attempt waits for its outcome before it is `failed`. */
  outcomeTimeoutMs: number
  /** How often a waiting attempt looks in the store for a report received by another process. */
  pollMs: number
}

/**
 * What a signature is for, first in the signed string: one secret signs both directions, and
 * without the label a captured attempt POST (signed for that attempt id, fresh) would pass as
 * that attempt's callback.
 */
export const WEBHOOK_LABELS = { attempt: 'switchboard.attempt.v1', callback: 'switchboard.callback.v1' } as const
export type WebhookDirection = keyof typeof WEBHOOK_LABELS

/**
 * "sha256=<hex>" of HMAC-SHA256(secret, "<label>.<timestamp>.<attempt id>.<body>"). The attempt
 * id is signed so a report cannot be replayed onto another attempt (each attempt id belongs to
 * one account, so not onto another account either).
 */
export function signWebhook(secret: string, direction: WebhookDirection, timestamp: string, attemptId: string, body: string | Buffer): string {
  return `sha256=${createHmac('sha256', secret).update(`${WEBHOOK_LABELS[direction]}.${timestamp}.${attemptId}.`).update(body).digest('hex')}`
}

/** null when the callback's signature and timestamp are good, else why not. */
export function checkSignature(secret: string, headers: Record<string, string | undefined>, attemptId: string, body: Buffer, now: number): string | null {
  const signature = headers['x-switchboard-signature']
  const timestamp = headers['x-switchboard-timestamp']
  if (!signature || !timestamp) return 'X-Switchboard-Signature and X-Switchboard-Timestamp are required'
  if (!/^\d{1,12}$/.test(timestamp)) return 'X-Switchboard-Timestamp must be Unix seconds'
  if (Math.abs(now - Number(timestamp) * 1000) > SIGNATURE_TOLERANCE_MS) return 'X-Switchboard-Timestamp is more than 5 minutes away from now'
  const expected = Buffer.from(signWebhook(secret, 'callback', timestamp, attemptId, body))
  const given = Buffer.from(signature)
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return 'the signature does not match'
  return null
}

const sleep = (ms: number) => delay(Math.max(0, ms), undefined, { ref: false })

class Permanent extends Error {}

/** What close() hands the attempts waiting for a report (an identity, never recorded). */
const STOPPED: AttemptResult = { outcome: 'failed', detail: 'service stopped before the webhook reported an outcome' }

export class WebhookProvider implements Provider {
  readonly name = 'webhook'
  private readonly waiters = new Map<string, (result: AttemptResult) => void>()
  private closed = false

  constructor(
    private readonly options: WebhookOptions,
    private readonly reports?: Collection<WebhookReportDoc>,
  ) {}

  callbackUrl(attemptId: string) {
    return `${this.options.callbackBaseUrl.replace(/\/$/, '')}/dialer/v1/attempts/${attemptId}/outcome`
  }

  async dial(attempt: AttemptRequest): Promise<AttemptResult> {
    if (!this.options.url) throw new Error('DIALER_WEBHOOK_URL is not set')
    const body = JSON.stringify({
      attemptId: attempt.attemptId,
      batchId: attempt.batchId,
      contactId: attempt.contactId,
      identifier: attempt.identifier,
      address: attempt.address.address,
      type: attempt.address.type,
      customFields: attempt.customFields,
      callbackUrl: this.callbackUrl(attempt.attemptId),
    })
    // Listen before sending: a receiver may report before its answer to the POST arrives.
    const reported = new Promise<AttemptResult>(resolve => this.waiters.set(attempt.attemptId, resolve))
    let early: AttemptResult | undefined
    void reported.then(result => (early = result))
    try {
      let tries: number
      try {
        tries = await this.deliver(attempt.attemptId, body)
      } catch (error) {
        // A receiver that reported before its POST finally failed: that result counts. A stop
        // before any try got through: the receiver never took the call.
        return early && early !== STOPPED ? early : { outcome: 'failed', detail: `webhook not delivered: ${(error as Error).message}` }
      }
      return await this.awaitOutcome(attempt.attemptId, reported, Date.now() + this.options.outcomeTimeoutMs, `webhook accepted the attempt (try ${tries})`)
    } finally {
      this.waiters.delete(attempt.attemptId)
    }
  }

  /** POSTs until a 2xx (resolves with the number of tries), a permanent refusal or the last try. */
  private async deliver(attemptId: string, body: string): Promise<number> {
    const { url, secret, timeoutMs, maxTries, backoffMs } = this.options
    let last = ''
    for (let n = 1; n <= maxTries; n++) {
      if (n > 1) await sleep(backoffMs * 2 ** (n - 2))
      if (this.closed) throw new Error(`service stopping (after ${n - 1} tries, last: ${last})`)
      const timestamp = String(Math.floor(Date.now() / 1000))
      try {
        const res = await fetch(url!, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'x-switchboard-timestamp': timestamp,
            'x-switchboard-signature': signWebhook(secret, 'attempt', timestamp, attemptId, body),
            'x-switchboard-attempt-id': attemptId,
            'x-switchboard-delivery': String(n),
          },
          body,
          signal: AbortSignal.timeout(timeoutMs),
        })
        await res.arrayBuffer().catch(() => undefined)
        if (res.ok) return n
        last = `HTTP ${res.status}`
        if (res.status < 500 && res.status !== 429) throw new Permanent(`refused with HTTP ${res.status}`)
      } catch (error) {
        if (error instanceof Permanent) throw error
        const e = error as Error & { cause?: { code?: string } }
        last = e.name === 'TimeoutError' ? `no answer within ${timeoutMs} ms` : e.cause?.code ?? e.message
      }
    }
    throw new Error(`gave up after ${maxTries} tries (last: ${last})`)
  }

  private async awaitOutcome(attemptId: string, reported: Promise<AttemptResult>, deadline: number, accepted: string): Promise<AttemptResult> {
    const { outcomeTimeoutMs, pollMs } = this.options
    for (;;) {
      const left = deadline - Date.now()
      const result = await Promise.race([reported, sleep(Math.min(pollMs, left)).then(() => null)])
      if (result === STOPPED) throw new AttemptHandedOver(`service stopped while the receiver has attempt ${attemptId}: the next scheduler follows it`)
      if (result) return result
      const doc = await this.reports?.findOne({ _id: attemptId })
      if (doc) return { outcome: doc.outcome, detail: doc.detail ?? 'reported by webhook' }
      if (Date.now() >= deadline) return { outcome: 'failed', detail: `${accepted} but reported no outcome within ${outcomeTimeoutMs} ms` }
    }
  }

  /**
   * An attempt whose scheduler died (the receiver took it; the call goes on there): its report,
   * stored by whichever process received it, until the outcome timeout counted from its start.
   */
  async resume({ attemptId, startedAt }: ResumedAttempt): Promise<AttemptResult> {
    const reported = new Promise<AttemptResult>(resolve => this.waiters.set(attemptId, resolve))
    try {
      return await this.awaitOutcome(attemptId, reported, startedAt + this.options.outcomeTimeoutMs, 'webhook took the attempt (its scheduler died since)')
    } finally {
      this.waiters.delete(attemptId)
    }
  }

  /** A report received by this process: the waiting attempt (if it runs here) ends now. */
  deliverReport(attemptId: string, result: AttemptResult) {
    this.waiters.get(attemptId)?.(result)
  }

  /** Service stopping: attempts the receiver took are handed over (AttemptHandedOver), the others end as `failed`. */
  close() {
    this.closed = true
    for (const settle of this.waiters.values()) settle(STOPPED)
  }
}

interface AttemptLookup {
  findOne(filter: { _id: string }): Promise<{ provider: string; outcome: Outcome | null } | null>
}

/** The callback endpoint's logic: signature, attempt state, one report per attempt. */
export class WebhookOutcomes {
  constructor(
    private readonly secret: string,
    private readonly attempts: AttemptLookup,
    private readonly reports: Collection<WebhookReportDoc>,
    private readonly provider: WebhookProvider | undefined,
    private readonly now: () => number,
  ) {}

  /** Throws 401 unless the raw body is signed as a callback, for this attempt, with DIALER_WEBHOOK_SECRET. */
  authenticate(headers: Record<string, string | undefined>, attemptId: string, body: Buffer) {
    if (!this.secret) throw new Unauthenticated('INVALID_SIGNATURE', 'Webhook outcomes are not accepted: DIALER_WEBHOOK_SECRET is not set')
    const problem = checkSignature(this.secret, headers, attemptId, body, this.now())
    if (problem) throw new Unauthenticated('INVALID_SIGNATURE', `The callback is not signed correctly: ${problem}`)
  }

  async report(attemptId: string, outcome: Outcome, detail: string | null) {
    const attempt = await this.attempts.findOne({ _id: attemptId })
    if (!attempt || attempt.provider !== 'webhook') throw new NotFound('ATTEMPT_NOT_FOUND', `No webhook attempt ${attemptId}`)
    const previous = () => this.reports.findOne({ _id: attemptId })
    if (attempt.outcome !== null) {
      const earlier = await previous()
      throw new InvalidState('ATTEMPT_FINISHED', 'The attempt already has its outcome', { outcome: attempt.outcome, reported: earlier ? earlier.outcome : null })
    }
    try {
      await this.reports.insertOne({ _id: attemptId, outcome, detail, receivedAt: new Date(this.now()) })
    } catch (error) {
      if (!(error instanceof DuplicateKeyError)) throw error
      const earlier = await previous()
      throw new InvalidState('OUTCOME_ALREADY_REPORTED', 'An outcome was already reported for this attempt', { outcome: earlier?.outcome ?? null })
    }
    this.provider?.deliverReport(attemptId, { outcome, detail: detail ?? 'reported by webhook' })
    return { attemptId, outcome, detail, status: 'accepted' }
  }
}
