// Attempt history (`dialer_attempts`): one document per attempt, written when the attempt is
// claimed (outcome null = in flight) and completed with its outcome when the provider answers.
import type { Collection, Store } from '../platform/store/index.js'
import { COLLECTIONS } from './collections.js'
import type { Outcome } from './rules.js'

export interface AttemptDoc {
  _id: string
  accountId: string
  batchId: string
  contactId: string
  identifier: string
  address: string
  type: 'phone' | 'email' | 'whatsapp'
  /** 1 for the contact's first attempt. */
  attemptNumber: number
  provider: string
  workerId: string
  outcome: Outcome | null
  detail: string | null
  startedAt: Date
  endedAt: Date | null
}

export function attemptView(doc: AttemptDoc) {
  return {
    attemptId: doc._id,
    batchId: doc.batchId,
    contactId: doc.contactId,
    identifier: doc.identifier,
    address: doc.address,
    type: doc.type,
    attemptNumber: doc.attemptNumber,
    provider: doc.provider,
    outcome: doc.outcome,
    detail: doc.detail,
    startedAt: new Date(doc.startedAt).toISOString(),
    endedAt: doc.endedAt ? new Date(doc.endedAt).toISOString() : null,
  }
}

export class Attempts {
  readonly docs: Collection<AttemptDoc>
  constructor(store: Store) {
    this.docs = store.collection<AttemptDoc>(COLLECTIONS.attempts)
  }

  async begin(doc: AttemptDoc) {
    await this.docs.insertOne(doc)
  }

  async finish(attemptId: string, outcome: Outcome, detail: string | null, endedAt: Date) {
    await this.docs.updateOne({ _id: attemptId, outcome: null }, { $set: { outcome, detail, endedAt } })
  }

  /** A batch's attempts, newest first; `outcome` filters. */
  async list(batchId: string, filter: { outcome?: Outcome }, limit: number, offset: number) {
    const query: Record<string, unknown> = { batchId }
    if (filter.outcome) query.outcome = filter.outcome
    const [docs, total] = await Promise.all([
      this.docs.find(query, { sort: { startedAt: -1, _id: -1 }, skip: offset, limit }),
      this.docs.countDocuments(query),
    ])
    return { data: docs.map(attemptView), total }
  }

  /** One contact's attempts (contact ids are unique across batches), oldest first (the most recent `limit`). */
  async forContact(contactId: string, limit = 100) {
    const docs = await this.docs.find({ contactId }, { sort: { startedAt: -1, _id: -1 }, limit })
    return docs.reverse().map(attemptView)
  }
}
