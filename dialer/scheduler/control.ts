// Contact control and progress: a contact with its attempts and the "why is it (not) being
// dialed" answer, reschedule, cancel, and a batch's progress counters (one aggregation).
import { Invalid, NotFound, InvalidState } from '../../platform/errors.js'
import type { Platform } from '../../platform/index.js'
import type { Collection } from '../../platform/store/index.js'
import type { CountRow } from '../../platform/store/counted-index.js'
import { COLLECTIONS, type ContactDoc } from '../collections.js'
import { ActiveContacts } from '../active-contacts.js'
import type { BatchDoc } from '../batches.js'
import { contactView } from '../contacts.js'
import type { Attempts } from '../attempts.js'
import { blockLookup } from '../blocked-addresses.js'
import { type BatchRules, dialability } from '../rules.js'

const SCHEDULE_HORIZON_MS = 30 * 24 * 60 * 60 * 1000

export interface BatchProgress {
  pending: number
  inProgress: number
  done: number
  cancelled: number
  /** Done contacts by how they ended: their last attempt's outcome, or `blocked`. */
  byOutcome: Record<string, number>
}

export const emptyProgress = (): BatchProgress => ({ pending: 0, inProgress: 0, done: 0, cancelled: 0, byOutcome: {} })

export class ContactControl {
  private readonly contacts: Collection<ContactDoc>
  private readonly active: ActiveContacts
  private readonly blocked: Collection<{ _id: string; accountId: string; addressType: string; address: string }>

  constructor(private readonly platform: Platform, private readonly attempts: Attempts) {
    this.contacts = platform.store.collection<ContactDoc>(COLLECTIONS.contacts)
    this.active = new ActiveContacts(platform.store)
    this.blocked = platform.store.collection(COLLECTIONS.blocked)
  }

  private async find(batch: BatchDoc, contactId: string) {
    const doc = await this.contacts.findOne({ _id: contactId, batchId: batch._id })
    if (!doc) throw new NotFound('NOT_FOUND', 'Contact not found')
    return doc
  }

  /** The contact, its attempts (oldest first) and whether/why/when it may be dialed. */
  async detail(batch: BatchDoc, contactId: string) {
    const doc = await this.find(batch, contactId)
    return this.describe(batch, doc)
  }

  private async describe(batch: BatchDoc, doc: ContactDoc) {
    const lookup = blockLookup(batch.accountId, doc.addresses)
    const [blockedDocs, attempts] = await Promise.all([
      this.blocked.find({ accountId: batch.accountId, address: { $in: lookup.values } }),
      this.attempts.forContact(doc._id),
    ])
    const blocked = new Set(blockedDocs.map(lookup.keyOf))
    const verdict = dialability({ rules: (batch.rules ?? {}) as BatchRules, batchStatus: batch.status, contact: doc, now: this.platform.clock.now(), blocked })
    return {
      ...contactView(doc),
      lastOutcome: doc.lastOutcome ?? null,
      doneReason: doc.doneReason ?? null,
      attempts: doc.attempts,
      addressAttempts: doc.addressAttempts ?? {},
      attemptHistory: attempts,
      dialability: {
        dialable: verdict.dialable,
        reason: verdict.reason,
        nextEligibleAt: verdict.nextEligibleAt === null ? null : new Date(verdict.nextEligibleAt).toISOString(),
        address: verdict.address,
      },
    }
  }

  /**
   * Next attempt at `scheduledAt` (UTC, future, within 30 days). A done or cancelled contact is
   * put back to pending (its counters kept); one in flight is 409.
   */
  async reschedule(batch: BatchDoc, contactId: string, scheduledAt: string) {
    const now = this.platform.clock.now()
    const at = Date.parse(scheduledAt)
    const expected = 'a UTC date-time in the future and within 30 days'
    const invalid = (code: string, reason: string) =>
      new Invalid('VALIDATION_FAILED', `scheduledAt ${reason}`, { details: [{ field: 'scheduledAt', code, reason: `scheduledAt ${reason}`, meta: { received: scheduledAt, expected } }] })
    if (at <= now) throw invalid('SCHEDULED_AT_IN_PAST', 'must be in the future')
    if (at > now + SCHEDULE_HORIZON_MS) throw invalid('SCHEDULED_AT_TOO_FAR', 'must be within the next 30 days')
    const doc = await this.contacts.findOneAndUpdate(
      { _id: contactId, batchId: batch._id, state: { $in: ['pending', 'done', 'cancelled'] } },
      { $set: { scheduledAt: new Date(at), nextAttemptAt: new Date(at), state: 'pending', doneReason: null, lastSkipReason: null, updatedAt: new Date(now) } },
      { returnDocument: 'after' },
    )
    if (doc) {
      await this.active.reconcile(batch.accountId, { ids: [doc._id] })
      return this.describe(batch, doc)
    }
    const current = await this.find(batch, contactId)
    throw new InvalidState('CONTACT_IN_PROGRESS', 'The contact is being dialed now; reschedule it once the attempt has ended', { state: current.state })
  }

  /** No further attempts (an attempt in flight still ends and is recorded). Cancelling twice is fine. */
  async cancel(batch: BatchDoc, contactId: string) {
    const now = new Date(this.platform.clock.now())
    const doc = await this.contacts.findOneAndUpdate(
      { _id: contactId, batchId: batch._id, state: { $in: ['pending', 'in_progress', 'cancelled'] } },
      { $set: { state: 'cancelled', updatedAt: now } },
      { returnDocument: 'after' },
    )
    if (doc) {
      await this.active.reconcile(batch.accountId, { ids: [doc._id] })
      return this.describe(batch, doc)
    }
    const current = await this.find(batch, contactId)
    throw new InvalidState('CONTACT_DONE', 'The contact is already done; there is nothing left to cancel', { state: current.state })
  }

  /**
   * Counters by state and, for done contacts, by how they ended: one countBy, which the embedded
   * store answers from the numbers it keeps per batch, state and ending (the batch_progress
   * counted index), without reading a contact.
   */
  async progress(batchId: string): Promise<BatchProgress> {
    return progressOf(await this.contacts.countBy({ batchId }, PROGRESS_FIELDS))
  }
}

/** What a batch's progress groups its contacts by. */
export const PROGRESS_FIELDS = ['state', 'lastOutcome', 'doneReason']

/** A batch's progress from its contacts counted by PROGRESS_FIELDS. */
export function progressOf(rows: CountRow[]): BatchProgress {
  const progress = emptyProgress()
  for (const { values: [state, outcome, reason], n } of rows) {
    if (state === 'pending') progress.pending += n
    else if (state === 'in_progress') progress.inProgress += n
    else if (state === 'cancelled') progress.cancelled += n
    else if (state === 'done') {
      progress.done += n
      const key = reason === 'blocked' ? 'blocked' : String(outcome ?? reason ?? 'unknown')
      progress.byOutcome[key] = (progress.byOutcome[key] ?? 0) + n
    }
  }
  return progress
}
